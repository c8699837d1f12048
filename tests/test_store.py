"""Result tables on disk: appended rows survive, interrupted writes lose only the torn line,
finished keys are known, atomic writes replace whole files."""
import math
import os
import warnings

import pandas as pd
import pytest

from gradcomp.evaluation.common.store import ResultTable, as_table, write_atomic


def rows():
    return [{"method": "topk", "numel": 1024, "time_s": 0.5, "note": "a, \"quoted\" one"},
            {"method": "fp16", "numel": 4096, "time_s": math.nan, "note": None},
            {"method": "none", "numel": 16, "time_s": math.inf, "note": "None"}]


def test_append_and_read_back_types_nan_and_inf(tmp_path):
    table = ResultTable(tmp_path / "r.csv", ("method", "numel"))
    for r in rows():
        table.append(r)
    text = (tmp_path / "r.csv").read_text()
    assert text.count("method,numel") == 1 and text.endswith("\n")
    df = table.frame()
    assert list(df.columns) == ["method", "numel", "time_s", "note"]
    assert df["numel"].tolist() == [1024, 4096, 16]
    assert df["time_s"].iloc[0] == 0.5 and math.isnan(df["time_s"].iloc[1])
    assert df["time_s"].iloc[2] == math.inf
    assert df["note"].iloc[0] == 'a, "quoted" one' and df["note"].iloc[2] == "None"
    assert pd.isna(df["note"].iloc[1])


def test_done_keys_compare_as_stored_text(tmp_path):
    table = ResultTable(tmp_path / "r.csv", ("method", "numel"))
    assert table.done_keys() == set() and table.frame().empty
    for r in rows():
        table.append(r)
    done = table.done_keys()
    assert done == {("topk", "1024"), ("fp16", "4096"), ("none", "16")}
    assert table.key({"method": "topk", "numel": 1024}) in done
    assert table.key({"method": "topk", "numel": "1024"}) in done
    assert table.key({"method": "topk", "numel": 2048}) not in done
    picked = table.frame(keys={("fp16", "4096")})
    assert picked["method"].tolist() == ["fp16"]
    with pytest.raises(KeyError, match="numel"):
        table.key({"method": "topk"})


def test_a_new_column_widens_the_file_and_keeps_old_rows(tmp_path):
    table = ResultTable(tmp_path / "r.csv", ("method",))
    table.append({"method": "a", "x": 1})
    table.append({"method": "b", "x": 2, "y": "new"})
    table.append({"method": "c", "y": "only y"})
    df = table.frame()
    assert list(df.columns) == ["method", "x", "y"]
    assert df["method"].tolist() == ["a", "b", "c"]
    assert pd.isna(df["y"].iloc[0]) and df["y"].iloc[1] == "new" and pd.isna(df["x"].iloc[2])
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_torn_last_line_is_dropped_with_a_warning_and_cut_on_next_append(tmp_path):
    path = tmp_path / "r.csv"
    table = ResultTable(path, ("method", "numel"))
    for r in rows()[:2]:
        table.append(r)
    with open(path, "a") as f:  # a crash in the middle of writing the third row
        f.write("none,16,0.2")
    with pytest.warns(UserWarning, match=r"r\.csv.*torn"):
        df = table.frame()
    assert df["method"].tolist() == ["topk", "fp16"]
    with pytest.warns(UserWarning, match=r"r\.csv.*torn"):
        assert table.done_keys() == {("topk", "1024"), ("fp16", "4096")}
    with pytest.warns(UserWarning, match=r"r\.csv.*torn"):
        table.append(rows()[2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = table.frame()
    assert df["method"].tolist() == ["topk", "fp16", "none"]


def test_a_torn_header_leaves_an_empty_table(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("method,nu")
    table = ResultTable(path, ("method",))
    with pytest.warns(UserWarning, match="torn"):
        assert table.frame().empty
    with pytest.warns(UserWarning, match="torn"):
        table.append({"method": "a", "numel": 1})
    assert path.read_text() == "method,numel\na,1\n"


def test_a_malformed_line_is_dropped_with_its_line_number(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("method,numel\na,1\nb\nc,3\n")
    with pytest.warns(UserWarning, match=r"r\.csv:3: dropped a malformed line"):
        df = ResultTable(path, ("method",)).frame()
    assert df["method"].tolist() == ["a", "c"]


def test_a_damaged_middle_line_is_quarantined_and_the_table_rewritten(tmp_path):
    path = tmp_path / "r.csv"
    table = ResultTable(path, ("method", "numel"))
    for r in rows():
        table.append(r)
    lines = path.read_text().split("\n")
    damaged = ["fp16,40", "\x00" * 12]  # a half-written row; a block of NULs from a crash
    path.write_text("\n".join([lines[0], lines[1], damaged[0], damaged[1], lines[3], ""]))
    with pytest.warns(UserWarning) as caught:
        done = ResultTable(path, ("method", "numel")).done_keys()
    assert [str(w.message).split(": dropped a malformed line")[0][-6:] for w in caught] == [
        ".csv:3", ".csv:4"] and "r.csv.quarantine" in str(caught[0].message)
    assert done == {("topk", "1024"), ("none", "16")}  # fp16 is measured again
    assert not table.quarantine.exists()  # reading changes nothing
    resumed = ResultTable(path, ("method", "numel"))
    with pytest.warns(UserWarning, match=r"r\.csv: moved 2 damaged line\(s\) \(line 3, 4;"
                                         r".*r\.csv\.quarantine"):
        resumed.append(rows()[1])
    assert table.quarantine == tmp_path / "r.csv.quarantine"
    assert table.quarantine.read_text() == "".join(d + "\n" for d in damaged)  # nothing lost
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = pd.read_csv(path)  # every reader, not only ours, sees clean rows
        resumed.append({"method": "int8", "numel": 8, "time_s": 1.0, "note": "x"})
    assert plain["method"].tolist() == ["topk", "none", "fp16"]
    assert not plain["numel"].isna().any() and not plain.duplicated(["method", "numel"]).any()
    assert len(table.frame()) == 4
    assert sorted(os.listdir(tmp_path)) == [".r.csv.lock", "r.csv", "r.csv.quarantine"]  # no .tmp


def test_quarantine_keeps_a_torn_line_and_adds_to_earlier_ones(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("method,numel\na,1\nb,2,extra,fields\nc,3\n")
    table = ResultTable(path, ("method",))
    with pytest.warns(UserWarning, match="line 3"):
        table.append({"method": "d", "numel": 4})
    with open(path, "a") as f:
        f.write("e,")  # torn by a crash of a later append
    with pytest.warns(UserWarning, match="moved 1 damaged line.*line 5"):
        ResultTable(path, ("method",)).append({"method": "e", "numel": 5})
    assert table.quarantine.read_text() == "b,2,extra,fields\ne,\n"
    assert path.read_text() == "method,numel\na,1\nc,3\nd,4\ne,5\n"


def test_bad_input_is_refused_with_the_reason(tmp_path):
    table = ResultTable(tmp_path / "r.csv", ("method",))
    with pytest.raises(ValueError, match="line break"):
        table.append({"method": "a\nb"})
    table.append({"method": "a"})
    with pytest.raises(ValueError, match="no column.*numel"):
        ResultTable(tmp_path / "r.csv", ("method", "numel")).done_keys()
    assert as_table(None, ("method",)) is None
    assert as_table(tmp_path / "r.csv", ("method",)).key_columns == ("method",)
    with pytest.raises(ValueError, match="key columns"):
        as_table(table, ("numel",))


def test_write_atomic_replaces_whole_files_and_keeps_the_old_one_on_failure(tmp_path,
                                                                             monkeypatch):
    path = tmp_path / "sub" / "report.txt"
    write_atomic(path, "first")
    write_atomic(path, b"second")
    assert path.read_bytes() == b"second"

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "third")
    assert path.read_text() == "second"
    assert os.listdir(path.parent) == ["report.txt"]


def test_parquet_tables_append_and_resume(tmp_path):
    pytest.importorskip("pyarrow")
    table = ResultTable(tmp_path / "r.parquet", ("method", "numel"))
    for r in rows():
        table.append(r)
    df = table.frame()
    assert df["numel"].tolist() == [1024, 4096, 16] and math.isnan(df["time_s"].iloc[1])
    assert table.done_keys() == {("topk", "1024"), ("fp16", "4096"), ("none", "16")}
    assert table.frame(keys={("none", "16")})["method"].tolist() == ["none"]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_a_key_column_added_later_reads_as_its_default_in_older_rows(tmp_path, suffix):
    if suffix == "parquet":
        pytest.importorskip("pyarrow")
    path = tmp_path / f"r.{suffix}"
    old = ResultTable(path, ("method", "numel"))  # written before "repeat" was a key
    for r in rows()[:2]:
        old.append(r)
    table = ResultTable(path, ("method", "numel", "repeat"), defaults={"repeat": 0})
    assert table.done_keys() == {("topk", "1024", "0"), ("fp16", "4096", "0")}
    assert table.frame()["repeat"].tolist() == [0, 0]
    assert table.key({"method": "topk", "numel": 1024}) == ("topk", "1024", "0")
    # the same run measured again is a new row; the old rows keep their key
    assert table.append({**rows()[0], "repeat": 1})
    with pytest.warns(UserWarning, match="stored already"):  # fp16's old row is repeat 0
        assert not table.append({**rows()[1], "repeat": 0})
    assert table.done_keys() == {("topk", "1024", "0"), ("fp16", "4096", "0"),
                                 ("topk", "1024", "1")}
    assert table.frame(keys={("topk", "1024", "1")})["repeat"].tolist() == [1]


def _writer(path, tag, n):
    table = ResultTable(path, ("writer", "i"))
    for i in range(n):
        row = {"writer": tag, "i": i}
        if tag == "b" and i % 10 == 5:  # a new column: the file is rewritten
            row[f"extra{i}"] = i
        table.append(row)


def test_two_processes_appending_lose_no_row_and_store_no_key_twice(tmp_path):
    import multiprocessing as mp
    path = tmp_path / "r.csv"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, tag, 150)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    done = ResultTable(path, ("writer", "i")).done_keys()
    assert done == {(t, str(i)) for t in "ab" for i in range(150)}
    assert len(ResultTable(path).frame()) == 300
    table = ResultTable(path, ("writer", "i"))
    with pytest.warns(UserWarning, match="stored already"):
        assert table.append({"writer": "a", "i": 3}) is False
    assert len(table.frame()) == 300


def test_appends_read_the_table_again_only_after_another_writer_changed_it(tmp_path,
                                                                           monkeypatch):
    # A long sweep's curve table: each append used to read every row before it.
    reads, records = [], ResultTable._records
    monkeypatch.setattr(ResultTable, "_records", lambda self: reads.append(1) or records(self))
    table = ResultTable(tmp_path / "r.csv", ("i",))
    for i in range(50):
        assert table.append({"i": i, "x": i / 2})
    assert len(reads) == 1
    assert ResultTable(tmp_path / "r.csv", ("i",)).append({"i": 50})  # another writer
    with pytest.warns(UserWarning, match="stored already"):
        assert table.append({"i": 50}) is False
    assert table.append({"i": 51, "y": "new"})  # a new column: the file is rewritten
    read = len(reads)
    assert table.append({"i": 52}) and len(reads) == read
    assert table.done_keys() == {(str(i),) for i in range(53)}


def test_a_failed_write_leaves_the_table_as_it_was_and_names_it(tmp_path):
    import resource
    import signal
    path = tmp_path / "r.csv"
    table = ResultTable(path, ("method",))
    table.append({"method": "a", "x": 1})
    before = path.read_bytes()
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 5, limits[1]))
    try:  # the file may grow 5 bytes: the next row does not fit (EFBIG, like a full disk)
        with pytest.raises(OSError) as caught:
            table.append({"method": "b" * 50, "x": 2})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, old)
    assert caught.value.filename == str(path)
    assert path.read_bytes() == before
