"""The train bench with auto's choice logged: each decision after an exploration, each
bandwidth refit and each re-pricing, on every rank (trace-r<repeat>-rank<rank>.json; the
ranks' logs agree: they hold reduced values). For the code before ae8b757, whose
`Chooser._reprice` took (x_now, codec_now, drift)."""
import json, os, sys
from gradcomp.comm.auto import choice
from gradcomp.comm.auto.pricing import idle_points

LOG = []
C = choice.Chooser
orig_reprice, orig_refit, orig_dec = C._reprice, C._refit_bandwidth, C._decide_from_exploration

def refit(self, samples):
    x = orig_refit(self, samples)
    pts = idle_points(samples, self.transfers, self.workers)
    LOG.append({"refit": [(s.iteration, s.candidate, s.comm_s, s.codec_s, s.nbytes, s.idle_link)
                          for s in samples], "x_now": x, "x": self.x, "alpha": self.alpha})
    return x

def reprice(self, x_now, codec_now, drift):
    before = dict(self.decisions)
    r = orig_reprice(self, x_now, codec_now, drift)
    LOG.append({"reprice": True, "x_now": x_now, "codec_now": codec_now, "drift": drift,
                "before": before, "after": dict(self.decisions), "x": self.x,
                "prices": {c: self.predict(0, c) for c in range(len(self.transfers))}})
    return r

def dec(self, reduce, iteration, mark=None):
    r = orig_dec(self, reduce, iteration, mark)
    LOG.append({"decide_at": iteration, "result": r, "alpha": self.alpha, "x": self.x,
                "codec": {str(k): v for k, v in self.codec.items()},
                "rounds": self.rounds, "decisions": dict(self.decisions),
                "prices": {c: self.predict(0, c) for c in range(len(self.transfers))}
                if self.decisions else {}})
    return r

C._reprice, C._refit_bandwidth, C._decide_from_exploration = reprice, refit, dec
from gradcomp.evaluation.benches import train
try:
    train.main(sys.argv[1:])
finally:
    rank = os.environ.get("RANK", "x")
    rep = sys.argv[sys.argv.index("--repeat") + 1]
    with open(f"trace-r{rep}-rank{rank}.json", "w") as f:
        json.dump(LOG, f)
