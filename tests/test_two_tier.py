"""The cluster of the evaluation model (`Network`): nodes of GPUs sharing NICs, its checks and
defaults, and the compute slowdown the timelines apply to every method."""
import pytest

from gradcomp.evaluation.model.fsdp import predict_fsdp
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.model.timeline import predict
from gradcomp.evaluation.model.topology import homogeneous
from gradcomp.evaluation.profiles.profiles import Profile


def test_a_node_of_gpus():
    net = Network(32, "100gbit", gpus_per_node=8, rails=4, intra_bandwidth_bps="2400gbit")
    assert net.nodes == 4 and net.algorithm == "auto" and net.intra_bandwidth_bps == 2.4e12
    assert Network(4, "1gbit").algorithm == "ring" and Network(4, "1gbit").nodes == 4
    assert Network(4, "1gbit", rails=2).algorithm == "auto"
    # eight GPUs behind one NIC: a ring crosses it once per direction, as with a NIC per GPU,
    # but in an all-to-all the node's NIC carries all 8 GPUs' traffic to the other node
    shared = Network(16, "100gbit", gpus_per_node=8, intra_bandwidth_bps="2400gbit",
                     algorithm="ring")
    flat = Network(16, "100gbit")
    assert shared.cost("allgather", 1e8) == pytest.approx(flat.cost("allgather", 1e8))
    assert shared.cost("alltoall", 1e8) == pytest.approx(64 / 15 * flat.cost("alltoall", 1e8))
    # NICs per node (rails) add up
    one_rail = Network(32, "100gbit", gpus_per_node=8, intra_bandwidth_bps="2400gbit")
    assert net.cost("allreduce", 1e9) < one_rail.cost("allreduce", 1e9) / 3


def test_cluster_options_are_checked():
    cases = [({"gpus_per_node": 3, "intra_bandwidth_bps": 1e12}, "multiple"),
             ({"gpus_per_node": 2}, "intra_bandwidth_bps=None"),
             ({"gpus_per_node": 0}, "gpus_per_node"), ({"rails": 0}, "rails"),
             ({"compute_slowdown": 0.9}, "compute_slowdown"),
             ({"intra_efficiency": 0}, "intra_efficiency"),
             ({"intra_latency_s": -1}, "intra_latency_s"),
             ({"intra_bandwidth_bps": "fast"}, "intra_bandwidth"),
             ({"algorithm": "forest"}, "algorithm='forest'"),
             ({"topology": homogeneous(4, "1gbit"), "rails": 2}, "with a topology")]
    for options, message in cases:
        with pytest.raises(ValueError, match=message):
            Network(4, "1gbit", **options)


PROFILE = Profile("three", sizes=(4000, 30000, 200000), ready_s=(0.002, 0.005, 0.011),
                  forward_s=0.004, backward_s=0.012, optimizer_s=0.003,
                  shapes=((4000,), (300, 100), (400, 500)), finalize_s=0.001)


def scaled(profile, k):
    return Profile(profile.name, profile.sizes, [t * k for t in profile.ready_s],
                   profile.forward_s * k, profile.backward_s * k, profile.optimizer_s * k,
                   shapes=profile.shapes, finalize_s=profile.finalize_s)


@pytest.mark.parametrize("method", ["none", "fp16", "topk", "powersgd"])
def test_a_slower_distributed_worker_is_a_profile_of_slower_compute(method):
    k = 1.3
    slowed = predict(PROFILE, Network(4, "1gbit", 1e-5, compute_slowdown=k), method,
                     contention=1.5)
    same = predict(scaled(PROFILE, k), Network(4, "1gbit", 1e-5), method, contention=1.5)
    plain = predict(PROFILE, Network(4, "1gbit", 1e-5), method, contention=1.5)
    assert slowed.t_iter_s == pytest.approx(same.t_iter_s) and slowed.t_iter_s > plain.t_iter_s
    # the single worker is not slowed: SF's numerator stays the profile's
    assert slowed.t_iter_single_s == PROFILE.t_iter_single
    assert slowed.sf == pytest.approx(PROFILE.t_iter_single / slowed.t_iter_s)


@pytest.mark.parametrize("method", ["none", "fp16"])
def test_the_fsdp_timeline_slows_compute_alike(method):
    k = 1.5
    slowed = predict_fsdp(PROFILE, Network(4, "1gbit", compute_slowdown=k), method)
    same = predict_fsdp(scaled(PROFILE, k), Network(4, "1gbit"), method)
    assert slowed.t_iter_s == pytest.approx(same.t_iter_s)
    assert slowed.t_iter_s > predict_fsdp(PROFILE, Network(4, "1gbit"), method).t_iter_s


def test_fsdp_prices_its_collectives_on_the_cluster():
    # one unit, collectives in the compute thread: the iteration differs between two clusters
    # by two all-gathers of the unit and its reduce-scatter (FSDP's own) or all-to-all of the
    # compressed chunks (fp16: 2 bytes of ceil(n/p) values to each of the p workers)
    numel, p = sum(PROFILE.sizes), 8
    flat = Network(p, "100mbit")
    nodes = Network(p, "100mbit", gpus_per_node=4, intra_bandwidth_bps="1000gbit",
                    algorithm="hierarchical")  # (a ring costs what the flat ring does)
    for method, collective, nbytes in (("none", "reducescatter", numel * 4),
                                       ("fp16", "alltoall", p * 2 * -(-numel // p))):
        t = [predict_fsdp(PROFILE, net, method, unit_mb=1000, overlap=False).t_iter_s
             for net in (flat, nodes)]
        differs = [2 * net.cost("allgather", numel * 4 / p) + net.cost(collective, nbytes)
                   for net in (flat, nodes)]
        assert t[1] - t[0] == pytest.approx(differs[1] - differs[0])
        assert differs[1] != pytest.approx(differs[0])
