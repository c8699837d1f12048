"""A check shared by the tests of the tables that report `auto` (`bench train`, `validate`)."""


def assert_choice_explained(choices: str, switches, warmup: int) -> None:
    """`auto_choices` of a one-bucket run ("bucket 0: NAME since I") holds from before its
    timed iterations (from `warmup` on) with no switch listed while timed (`auto_switches`: a
    NaN cell when empty), or the last switch listed made it (a re-pricing or its trial may
    switch while timed on a busy machine: CI saw "29 0 none; 31 0 topk")."""
    name, since = choices.removeprefix("bucket 0: ").split(" since ")
    listed = switches if isinstance(switches, str) else ""
    if int(since) < warmup:
        assert listed == ""
    else:
        assert listed.split("; ")[-1] == f"{since} 0 {name}"
