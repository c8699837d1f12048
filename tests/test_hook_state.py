"""HookState and error-feedback state without processes: checkpoints, bad input."""
import pytest
import torch

import gradcomp
import gradcomp.comm
from gradcomp.comm import HookState


def test_loading_a_checkpoint_of_another_method_or_options_is_refused():
    saved = HookState(gradcomp.compressor("topk", ratio=0.25, error_feedback=True)).state_dict()
    for other in (gradcomp.compressor("topk", ratio=0.5, error_feedback=True),
                  gradcomp.compressor("topk", ratio=0.25),
                  gradcomp.compressor("randomk", ratio=0.25, error_feedback=True)):
        with pytest.raises(ValueError, match=r"saved by method 'topk' with options .*; this "
                           r"hook runs '\w+' with .*: build the hook with the same method"):
            HookState(other).load_state_dict(saved)
    HookState(gradcomp.compressor("topk", ratio=0.25, error_feedback=True)).load_state_dict(saved)


def test_a_state_dict_taken_earlier_does_not_change_with_training():
    c = gradcomp.compressor("topk", ratio=0.1, error_feedback=True)
    c.compress(torch.randn(100), key=0)
    snapshot = c.state_dict()
    before = snapshot["residuals"][0].clone()
    c.compress(torch.randn(100), key=0)
    assert torch.equal(snapshot["residuals"][0], before)


@pytest.mark.parametrize("name", ["int8", "topk", "powersgd", "signsgd"])
def test_a_non_finite_gradient_does_not_poison_later_steps(name):
    c = gradcomp.compressor(name, error_feedback=True)
    bad = torch.randn(16, 8)
    bad[3, 2] = float("inf")
    assert not torch.isfinite(c.decompress(c.compress(bad, key=0))).all()  # visible now
    for _ in range(3):
        out = c.decompress(c.compress(torch.randn(16, 8), key=0))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("bad", [dict(warm_start="no"), dict(error_feedback=1),
                                 dict(seed=-1), dict(seed=1.5),
                                 dict(orthogonalization_epsilon="x")])
def test_powersgd_options_are_checked_by_name(bad):
    (name,) = bad
    with pytest.raises(ValueError, match=name):
        gradcomp.compressor("powersgd", **bad)


def test_pickled_state_keeps_its_telemetry_setting():
    import pickle

    off = pickle.loads(pickle.dumps(HookState(gradcomp.compressor("fp16"), telemetry_limit=0)))
    on = pickle.loads(pickle.dumps(HookState(gradcomp.compressor("fp16"), telemetry_limit=5)))
    assert off.telemetry is None and on.telemetry.records.maxlen == 5


def test_misuse_gets_one_clear_error_naming_what_is_wrong():
    with pytest.raises(TypeError, match="ddp_model must be a torch.nn.parallel"):
        gradcomp.comm.register(torch.nn.Linear(2, 2), "fp16")
    for bad in ({}, [], {"method": "fp16"}):
        with pytest.raises(ValueError, match="not a gradcomp hook checkpoint"):
            HookState(gradcomp.compressor("fp16")).load_state_dict(bad)
    for name in ("topk", "powersgd"):
        with pytest.raises(ValueError, match="error_feedback='yes' is not allowed"):
            gradcomp.compressor(name, error_feedback="yes")


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    """A gloo process group of this process alone (DDP needs one)."""
    import torch.distributed as dist

    from gradcomp.evaluation.common.env import end_process_group

    if dist.is_initialized():
        yield
        return
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    end_process_group()  # the tests' hooked DDPs freed first


def train_alone(model, method, steps=4, **options):
    import warnings

    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model)
    state = gradcomp.comm.register(ddp, method, **options)
    x = torch.randn(8, 8, dtype=next(model.parameters()).dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            ddp(x).float().square().mean().backward()
    return state.telemetry_rows(), [str(w.message) for w in caught
                                    if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("model, method", [
    (lambda: torch.nn.Linear(8, 8).to(torch.bfloat16), "fp16"),
    (lambda: torch.nn.LayerNorm(8), "powersgd"),
])
def test_an_iteration_left_uncompressed_is_recorded_and_warned_once(one_rank_group, model,
                                                                     method):
    rows, warned = train_alone(model(), method)
    assert {r["uncompressed"] for r in rows if r["iteration"] == 0} == {"start_iter"}
    assert {r["uncompressed"] for r in rows if r["iteration"] >= 1} == {"min_compression_rate"}
    assert len(warned) == 1 and "sent every bucket uncompressed" in warned[0]
    assert method in warned[0]


def test_a_compressing_hook_does_not_warn(one_rank_group):
    rows, warned = train_alone(torch.nn.Linear(8, 8), "topk", ratio=0.25)
    assert {r["uncompressed"] for r in rows if r["iteration"] >= 1} == {""}
    assert warned == []


@pytest.mark.parametrize("method", ["none", "fp16", "topk", "powersgd", "qsgd"])
def test_a_communicator_averages_a_bucket_in_one_call_with_named_timings(one_rank_group,
                                                                         method):
    from gradcomp.comm.communicators import Bucket
    from gradcomp.comm.telemetry import BucketRecord

    state = gradcomp.comm.build_state(method, start_iter=0, min_compression_rate=0.0)
    grad = torch.randn(64 * 64, generator=torch.Generator().manual_seed(0))
    buf = grad.clone()
    bucket = Bucket(buf, 0, lambda: [torch.Size([64, 64])])
    communicator = state.communicator_for(bucket, 0)
    assert communicator is not state.dense or method == "none"
    record = BucketRecord(0, 0, communicator.name, buf.numel(), buf.numel() * 4, 0)
    seen = []
    out = communicator.average(bucket, record.time(buf.device), seen.append).wait()
    assert out is buf  # the average, written into the bucket
    assert len(seen) == 1 and record.bytes_sent == seen[0].nbytes > 0
    assert record.started <= record.encoded <= record.exchanged <= record.decoded
    assert all(record.row()[k] >= 0 for k in ("encode_s", "comm_s", "decode_s"))
    if method in ("none", "fp16"):  # one rank: the average is what this rank sent
        torch.testing.assert_close(out, grad, rtol=1e-3, atol=1e-3)
    untimed = BucketRecord(0, 0, communicator.name, buf.numel(), buf.numel() * 4, 0)
    communicator.average(bucket, untimed).wait()
    assert (untimed.started, untimed.encoded, untimed.decoded) == (None, None, None)
    assert untimed.bytes_sent == record.bytes_sent and not untimed.complete


def test_auto_is_a_route_of_the_hook_state_and_its_candidates_compress_nothing():
    from gradcomp.comm.auto import AutoRoute
    from gradcomp.comm.state import FixedRoute

    fixed, auto = gradcomp.comm.build_state("topk"), gradcomp.comm.build_state("auto")
    assert type(fixed) is type(auto) is HookState
    assert isinstance(fixed.route, FixedRoute) and isinstance(auto.route, AutoRoute)
    assert not isinstance(auto.compressor, gradcomp.compressors.Compressor)
    assert not hasattr(auto.compressor, "compress")
    assert auto.compressor.name == "auto" and auto.state_dict()["method"] == "auto"
    assert auto.switches == [] and auto.chooser.decided_at is None  # auto's, on the state
    with pytest.raises(AttributeError):
        fixed.switches
