"""The timeline of a hook that compresses only between nodes (layout "hierarchical"): an
uncompressed reduce-scatter inside the node, the method on the 1/G shard across the nodes
(the G local ranks' rings sharing the node's NIC), an all-gather inside."""
import pytest

from gradcomp.evaluation.model.methods import MethodCost
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.model.timeline import predict
from gradcomp.evaluation.profiles.profiles import Profile

S = 4 * 2**20  # one bucket of 1 Mi float32 elements
PROFILE = Profile("one", [S // 4], [0.01], 0.02, 0.01, 0.005)
B, b = 100e6 / 8, 10e9 / 8  # bytes/s: 100 Mbit/s between nodes, 10 Gbit/s inside
NET = Network(4, "100mbit", gpus_per_node=2, intra_bandwidth_bps="10gbit", algorithm="ring")


def test_none_pays_the_slow_tier_once_per_byte_and_the_fast_one_inside():
    flat = predict(PROFILE, NET, "none")
    hier = predict(PROFILE, NET, "none", layout="hierarchical")
    # flat ring of 4: 2(p-1) steps of S/p, each at the slower hop: 1.5 S/B.
    assert flat.exposed_comm_s == pytest.approx(1.5 * S / B)
    # inside: reduce-scatter and all-gather, (G-1) steps of S/G each; across: 2 nodes of
    # 2 rings at B/2 each, 2(N-1)/N * (S/2) / (B/2) = S/B.
    assert hier.exposed_comm_s == pytest.approx(2 * (S / 2) / b + S / B)
    assert hier.wire_bytes == pytest.approx(S / 2 + S)  # across: S/2; inside: S/2 + S/2
    assert hier.t_iter_s < flat.t_iter_s


def test_a_method_compresses_only_the_shard_that_crosses_the_nodes():
    ratio8 = MethodCost.fixed_ratio(8.0, encode=(1e-3, 0.0), decode=(2e-3, 0.0))
    hier = predict(PROFILE, NET, ratio8, layout="hierarchical")
    across = (S / 2) / 8 / (B / 2)  # the shard's payload over the ring of 2 nodes at B/2
    assert hier.exposed_comm_s == pytest.approx(2 * (S / 2) / b + 1e-3 + across + 2e-3)
    assert hier.speedup == pytest.approx(
        predict(PROFILE, NET, "none", layout="hierarchical").t_iter_s / hier.t_iter_s)
    with pytest.raises(ValueError, match="layout"):
        predict(PROFILE, NET, "none", layout="tree")


def test_powersgd_compresses_the_shard_as_the_hook_cuts_it():
    # 1024 x 1024: each of the 2 local ranks' shards is 512 whole rows, one 512 x 1024 matrix.
    from gradcomp.evaluation.model.methods import resolve

    shaped = Profile("one", [S // 4], [0.01], 0.02, 0.01, 0.005, shapes=[(1024, 1024)])
    powersgd = resolve("powersgd")
    hier = predict(shaped, NET, powersgd, layout="hierarchical")
    assert hier.wire_bytes == pytest.approx(sum(powersgd.wire(((512, 1024),), 4)) + S)
