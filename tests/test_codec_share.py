"""Codec prices where the ranks outnumber the cores (`testbed.slowdown`): the share of the
all-at-once price, the blend of the bench's two ends, the fixed point, and the timeline's
busy time it rests on."""
import pytest

from gradcomp.evaluation.model.methods import Measured, PerBucket, resolve
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.model.timeline import busy_s, predict
from gradcomp.evaluation.profiles.profiles import Profile
from gradcomp.evaluation.testbed.slowdown import (blend, blended_costs, codec_share,
                                                 shared_prediction)

# one bucket of 1M elements, ready at the end of a 20 ms backward
PROFILE = Profile("one bucket", [1_000_000], [0.02], 0.01, 0.02, 0.005, shapes=[(1000, 1000)])


def test_the_share_follows_the_ranks_computing_beside_a_phase():
    # 4 ranks on 2 cores: a phase meets 1 + 3u computing ranks, u the busy fraction
    assert codec_share(4, 2, 0.0) == 0.0  # the others all wait: the rank runs alone
    assert codec_share(4, 2, 1 / 3) == 0.0  # 2 ranks on 2 cores: still no sharing
    assert codec_share(4, 2, 0.5) == pytest.approx(0.25)  # 2.5 ranks: a quarter of the way
    assert codec_share(4, 2, 1.0) == 1.0  # every rank at once, as the bench times it
    assert codec_share(4, 2, 1.7) == 1.0 and codec_share(4, 2, -0.1) == 0.0
    assert codec_share(2, 2, 0.0) == 1.0  # no rank waits for a core: both ends agree


def test_a_blend_weighs_each_measured_size_and_the_line():
    together = Measured((1.0, 2e-6), [1e3, 1e6], [0.004, 2.0])
    alone = Measured((0.5, 1e-6), [1e3, 1e6], [0.002, 1.0])
    half = blend(together, alone, 0.5)
    assert isinstance(half, Measured) and tuple(half) == pytest.approx((0.75, 1.5e-6))
    assert half.seconds == pytest.approx((0.003, 1.5))
    assert half(5e5) == pytest.approx((together(5e5) + alone(5e5)) / 2)
    assert blend(together, alone, 0.0).seconds == alone.seconds
    assert blend(together, alone, 1.0).seconds == together.seconds
    # a line without points, and a bucket's phases
    assert blend((2.0, 4e-6), (1.0, 2e-6), 0.25) == pytest.approx((1.25, 2.5e-6))
    phases = blend(PerBucket([together, (2.0, 4e-6)]), PerBucket([alone, (1.0, 2e-6)]), 0.5)
    assert isinstance(phases, PerBucket) and phases[1] == pytest.approx((1.5, 3e-6))
    costs = blended_costs({"int8": PerBucket([together]), "topk": PerBucket([together])},
                          {"int8": PerBucket([alone])}, 0.0)
    assert costs["int8"][0].seconds == alone.seconds  # what alone prices
    assert costs["topk"][0] is together  # the rest as measured together


def test_busy_time_is_the_iteration_less_its_wait_on_the_exchange():
    net = Network(4, 1e8)  # a slow link: the exchange is exposed
    method = resolve("int8").with_costs((0.0, 5e-9), (0.0, 3e-9))
    pred = predict(PROFILE, net, method, baseline_s=1.0)
    codec = 5e-3 + 4 * 3e-3  # encode, and decode of 4 gathered payloads, after backward
    assert pred.exposed_comm_s > codec
    assert busy_s(pred) == pytest.approx(0.01 + 0.02 + 0.005 + codec)
    with pytest.raises(ValueError, match="DiLoCo"):
        busy_s(predict(PROFILE, net, "diloco:H=10,method=int8", baseline_s=1.0))


@pytest.mark.parametrize("bandwidth", [1e8, 1e9, 1e11])
def test_the_price_is_the_fixed_point_of_its_busy_fraction(bandwidth):
    net = Network(4, bandwidth)
    together = PerBucket([(0.0, 4e-8), (0.0, 2e-8)])  # 40 and 20 ms per 1M elements
    alone = PerBucket([(0.0, 1e-8), (0.0, 0.5e-8)])

    def at(share):
        costs = blended_costs({"int8": together}, {"int8": alone}, share)
        return predict(PROFILE, net, resolve("int8", costs), baseline_s=1.0)

    pred, share = shared_prediction(at, 4, 2)
    settled = codec_share(4, 2, busy_s(pred) / pred.t_iter_s)
    assert share == pytest.approx(settled, abs=0.01)  # what its own busy fraction gives
    assert at(0.0).t_iter_s - 1e-12 <= pred.t_iter_s <= at(1.0).t_iter_s + 1e-12
    assert pred.t_iter_s == pytest.approx(at(share).t_iter_s)
    if bandwidth == 1e8:  # 0.8 s on the wire: the ranks mostly wait, each codec runs alone
        assert share == 0.0
    if bandwidth == 1e11:  # no wait: every rank's codec at once
        assert share == 1.0
