"""The FSDP timeline (`gradcomp.evaluation.model.fsdp`): a hand-computed two-unit iteration,
its limits, and the compressed reduce-scatter's bytes."""
import pytest

from gradcomp.evaluation.model.fsdp import predict_fsdp, units_of
from gradcomp.evaluation.model.methods import MethodCost
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.profiles.profiles import Profile, load_profile

# Two gradients of 1e6 bytes, one unit each; 2 workers at 1e6 bytes/s: every all-gather and
# FSDP reduce-scatter of a unit takes (p-1)/p * 1e6 / 1e6 = 0.5 s.
TWO = Profile("two", sizes=(250_000, 250_000), ready_s=(0.1, 0.3), forward_s=0.2,
              backward_s=0.3, optimizer_s=0.05)
SLOW = Network(2, 8e6)


def test_two_units_by_hand():
    # forward: gather u1 [0, 0.5], its forward [0.5, 0.6] while u0 is gathered [0.5, 1.0],
    # u0's forward [1.0, 1.1]; backward: gather u0 [1.1, 1.6], its backward [1.6, 1.7] while
    # u1 is gathered [1.6, 2.1]; u0's reduce-scatter [2.1, 2.6]; u1's backward [2.1, 2.3],
    # its reduce-scatter [2.6, 3.1]; + optimizer 0.05.
    pred = predict_fsdp(TWO, SLOW, "none", unit_mb=0.5)
    assert pred.forward_end_s == pytest.approx(1.1)
    assert pred.t_iter_s == pytest.approx(3.15)
    assert pred.units["rs_end_s"].tolist() == pytest.approx([2.6, 3.1])
    assert pred.rs_wire_bytes == pytest.approx(1e6)  # half of each unit's 1e6 bytes
    assert pred.wire_bytes == pytest.approx(3e6)  # + two all-gathers of 0.5e6 per unit
    assert pred.exposed_comm_s == pytest.approx(3.1 - 0.5)
    assert pred.speedup == 1.0


def test_blocking_reduce_scatter_holds_the_next_backward():
    # u1's backward waits for u0's reduce-scatter (2.6): [2.6, 2.8], then [2.8, 3.3].
    pred = predict_fsdp(TWO, SLOW, "none", unit_mb=0.5, blocking=True)
    assert pred.t_iter_s == pytest.approx(3.35)


def test_compressed_reduce_scatter_sends_the_chunks_payloads():
    quarter = MethodCost.fixed_ratio(4.0, name="quarter")
    pred = predict_fsdp(TWO, SLOW, quarter, unit_mb=0.5)
    assert pred.rs_wire_bytes == pytest.approx(2 * 0.125e6)  # per unit a chunk of 0.5e6 B / 4
    assert pred.t_iter_s < predict_fsdp(TWO, SLOW, "none", unit_mb=0.5).t_iter_s
    assert pred.speedup > 1


def test_infinitely_fast_network_leaves_the_compute():
    fast = Network(8, 1e18, reduce_bytes_per_s=1e30)
    profile = load_profile("resnet50")
    pred = predict_fsdp(profile, fast, "none")
    assert pred.t_iter_s == pytest.approx(profile.forward_s + profile.backward_s
                                          + profile.optimizer_s)
    assert pred.exposed_comm_s == pytest.approx(0.0, abs=1e-9)
    pred = predict_fsdp(TWO, fast, "none", unit_mb=0.5)
    assert pred.t_iter_s == pytest.approx(0.2 + 0.3 + 0.05)


def test_int8_sends_about_a_quarter_of_fsdps_reduce_scatter_bytes():
    none = predict_fsdp("gpt2", Network(8, "10gbit"), "none")
    int8 = predict_fsdp("gpt2", Network(8, "10gbit"), "int8")
    assert int8.rs_wire_bytes / none.rs_wire_bytes == pytest.approx(1 / 4 + 1 / 256, rel=0.01)
    units = units_of(load_profile("gpt2"), 25.0)
    assert len(units) == len(none.units) > 1
    assert sum(len(u) for u in units) == len(load_profile("gpt2").sizes)


def test_bad_method_and_unit_size_are_refused():
    with pytest.raises(ValueError, match="method='powersgd' is not allowed for FSDP"):
        predict_fsdp(TWO, SLOW, "powersgd")
    with pytest.raises(ValueError, match="unit_mb=0 is not allowed"):
        predict_fsdp(TWO, SLOW, "none", unit_mb=0)
    with pytest.raises(ValueError, match="blocking=1 is not allowed"):
        predict_fsdp(TWO, SLOW, "none", blocking=1)
