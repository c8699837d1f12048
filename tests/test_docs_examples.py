"""Every python block of docs/ that a user would copy runs in the test suite, as written: the
multi-process ones on 2 gloo ranks, all in one start of the ranks (tests/docs_workers.py), the
user workloads in this process; the trainers' scripts run in tests/test_integrations.py and the
README's script in tests/test_readme_ddp.py. A new python block in docs/ fails
`test_every_python_block_of_the_docs_is_run` until a test runs it."""
import importlib.util
import re
from pathlib import Path

import pytest
import torch

import gradcomp
from ddp_workers import spawn
from docs_workers import run_all

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: case -> (page, a text only that page's block holds): the blocks run by docs_workers.run_all.
SPAWNED = {
    "register": ("ddp.md", "gpu = torch.cuda.is_available()"),
    "checkpoint": ("ddp.md", "gradcomp.comm.save_state(ddp_model)"),
    "hierarchical": ("ddp.md", "hierarchical=True, gpus_per_node=8"),
    "blocksparse": ("collectives.md", 'communicator="blocksparse"'),
    "diloco": ("diloco.md", "gradcomp.diloco.DiLoCo("),
    "fsdp": ("fsdp2.md", 'state = gradcomp.fsdp.register(model, "int8")'),
    "hsdp": ("fsdp2.md", "register_replicas(model"),
}
IN_PROCESS = {"small_cnn": ("workload.md", "def small_cnn("),
              "small_lm": ("workload.md", "def small_lm(")}
ELSEWHERE = {"train_lightning.py": ("trainers.md", "# train_lightning.py"),  # test_integrations
             "train_accelerate.py": ("trainers.md", "# train_accelerate.py")}
LOW_LEVEL = "Lower level, like torch's own hooks:\n`"
#: On 2 ranks the hierarchical block's 8 GPUs per node become 1 (2 nodes of 1 rank), as the
#: page says.
ON_TWO_RANKS = ("gpus_per_node=8", "gpus_per_node=1")


def python_blocks(page: str, folder: Path = DOCS) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (folder / page).read_text(), re.S)


def block(page: str, marker: str) -> str:
    """The one python block of the page that holds `marker`."""
    (found,) = [b for b in python_blocks(page) if marker in b]
    return found


def test_every_python_block_of_the_docs_is_run():
    claimed = [block(page, marker)
               for page, marker in (*SPAWNED.values(), *IN_PROCESS.values(),
                                    *ELSEWHERE.values())]
    for page in sorted(p.name for p in DOCS.glob("*.md")):
        for found in python_blocks(page):
            assert found in claimed, f"{page}: a python block no test runs:\n{found}"
    integrations = (ROOT / "tests" / "test_integrations.py").read_text()
    for script in ELSEWHERE:  # runs each as written, under the trainer's own launcher
        assert f'docs_example("{script}")' in integrations, script
    (script,) = python_blocks("README.md", ROOT)  # the DDP script: tests/test_readme_ddp.py
    assert "## Add compression to a DDP training script\n\n```python\n" + script in (
        ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def ranks():
    snippets = {case: block(page, marker) for case, (page, marker) in SPAWNED.items()}
    assert ON_TWO_RANKS[0] in snippets["hierarchical"]
    assert "2 nodes of 1" in (DOCS / "ddp.md").read_text()
    snippets["hierarchical"] = snippets["hierarchical"].replace(*ON_TWO_RANKS)
    text = (DOCS / "ddp.md").read_text()
    snippets["low_level"] = text.split(LOW_LEVEL, 1)[1].split("`", 1)[0]
    return spawn(run_all, 2, snippets)


def same_on_both(ranks, case, key):
    a, b = (r[case][key] for r in ranks)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_ddp_register_snippet(ranks):
    assert [r["register"]["method"] for r in ranks] == ["powersgd", "powersgd"]
    assert ranks[0]["register"]["iteration"] == 3
    same_on_both(ranks, "register", "grad")  # the hook averaged them


def test_ddp_low_level_line_averages_in_fp16(ranks):
    for r in ranks:
        grad = r["low_level"]["grad"]
        assert torch.equal(grad, grad.half().float())  # what fp16 can hold: it went as fp16
        torch.testing.assert_close(grad, r["low_level"]["exact"], rtol=2e-3, atol=1e-4)
    same_on_both(ranks, "low_level", "grad")


def test_ddp_checkpoint_snippet_resumes_bit_for_bit(ranks):
    for r in ranks:
        got = r["checkpoint"]
        assert got["file"] and got["saved_iteration"] == got["loaded_iteration"] == 3
        assert torch.equal(got["straight"], got["resumed"])


def test_ddp_hierarchical_snippet_on_two_nodes_of_one_rank(ranks):
    for r in ranks:
        assert [s["method"] for s in r["hierarchical"]] == ["topk", "auto"]
        assert [s["iteration"] for s in r["hierarchical"]] == [2, 2]
    for a, b in zip(ranks[0]["hierarchical"], ranks[1]["hierarchical"]):
        torch.testing.assert_close(a["grad"], b["grad"], rtol=0, atol=0)


def test_blocksparse_snippet(ranks):
    (a,), (b,) = (r["blocksparse"] for r in ranks)
    assert a["method"] == "topk" and a["iteration"] == 2
    torch.testing.assert_close(a["grad"], b["grad"], rtol=0, atol=0)


def test_diloco_snippet_syncs_at_step_100(ranks):
    for r in ranks:
        got = r["diloco"]
        assert got["step"] == 100 and got["bytes"] > 0
        assert got["ckpt"] == ["diloco", "inner", "model", "outer"]
        assert not torch.equal(got["start"], got["params"])
    same_on_both(ranks, "diloco", "params")  # the outer step leaves every rank the global weights


def test_fsdp_snippet_compresses_the_reduce_scatter(ranks):
    for r in ranks:
        assert r["fsdp"]["rows"] > 0 and r["fsdp"]["ratio"] > 3  # int8: about 3.9x
        assert torch.isfinite(r["fsdp"]["grad"]).all()


def test_hsdp_snippet_keeps_the_replicas_identical(ranks):
    for r in ranks:
        assert not torch.equal(r["hsdp"]["start"], r["hsdp"]["params"])
    same_on_both(ranks, "hsdp", "params")


def test_workload_snippets_build_workloads():
    scope = {}
    exec(block(*IN_PROCESS["small_cnn"]), scope)  # noqa: S102 - the docs' own code
    vision = scope["small_cnn"](batch_size=4)
    lm_file = load(ROOT / "tests" / "data" / "user_lm.py")
    scope = dict(vars(lm_file))  # the abridged block's TinyLM and imports, from its file
    exec(block(*IN_PROCESS["small_lm"]), scope)  # noqa: S102
    lm = scope["small_lm"]()
    for workload, same_as in ((vision, load(ROOT / "tests" / "data" / "user_vision.py")
                               .small_cnn(batch_size=4)), (lm, lm_file.small_lm())):
        assert isinstance(workload, gradcomp.Workload)
        inputs, targets = workload.batches(1, 2)
        for mine, theirs in zip((inputs, targets), same_as.batches(1, 2)):
            assert torch.equal(mine, theirs)  # the page shows what the file runs
        workload.loss(workload.model(inputs), targets).backward()
        assert all(p.grad is not None for p in workload.model.parameters())
        assert isinstance(workload.evaluate(workload.model), float)


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
