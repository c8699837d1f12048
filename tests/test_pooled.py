"""A sweep's repeated measurements of rate-independent quantities (the compute profile, the
hook-path costs): the least disturbed repeat is used at every rate."""
import pandas as pd
import pytest

from gradcomp.evaluation.profiles.profiles import Profile, save_profile
from gradcomp.evaluation.testbed.pooled import (least_disturbed_costs,
                                                least_disturbed_profile, profile_line)


def profile(forward_s: float) -> Profile:
    return Profile("mlp", sizes=(10, 20), ready_s=(0.01, 0.02), forward_s=forward_s,
                   backward_s=0.03, optimizer_s=0.005)


def test_the_profile_with_the_shortest_iteration_is_used(tmp_path):
    paths = [tmp_path / f"profile-{r}.json" for r in ("100mbit", "500mbit", "1gbit")]
    for path, forward in zip(paths, (0.09, 0.02, 0.05)):
        save_profile(profile(forward), path)
    chosen, path = least_disturbed_profile([*paths, tmp_path / "not-measured.json"])
    assert path == paths[1] and chosen.forward_s == pytest.approx(0.02)
    with pytest.raises(FileNotFoundError, match="no profile"):
        least_disturbed_profile([tmp_path / "none.json"])


def test_per_key_the_hook_row_with_the_least_time_is_kept():
    keys = ("method", "numel")
    rate_a = pd.DataFrame({"method": ["topk", "topk", "none"], "numel": [100, 200, 100],
                           "encode_s": [0.010, 0.020, 0.001], "middle_s": [None] * 3,
                           "decode_s": [0.002, 0.004, 0.0]})
    rate_b = pd.DataFrame({"method": ["topk", "topk", "none"], "numel": [100, 200, 100],
                           "encode_s": [0.006, 0.030, 0.002], "middle_s": [None] * 3,
                           "decode_s": [0.003, 0.001, 0.0]})
    kept = least_disturbed_costs([rate_a, pd.DataFrame(), rate_b], keys)
    got = {(r.method, r.numel): (r.encode_s, r.decode_s) for r in kept.itertuples()}
    assert got == {("topk", 100): (0.006, 0.003), ("topk", 200): (0.020, 0.004),
                   ("none", 100): (0.001, 0.0)}
    assert least_disturbed_costs([pd.DataFrame()], keys).empty


def test_the_line_names_the_profile_used():
    table = pd.DataFrame({"profile_file": ["profile-mlp-b64-1gbit.json"] * 2,
                          "t_iter_single": [0.0431, 0.0431]})
    line = profile_line(table)
    assert "profile-mlp-b64-1gbit.json" in line and "43.1 ms" in line
