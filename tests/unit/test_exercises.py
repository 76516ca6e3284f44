"""Every exercise check rejects a wrong answer (with a hint), accepts the right one, and only
prints the hint when nothing was answered. The right answers reach the notebooks through papermill
(tests/notebooks/test_notebooks.py ANSWERS), so CI proves each is accepted against the live run."""
import pytest

from helpers.views import exercises

CASES = [  # (check, right answer, a wrong answer, the other arguments)
    (exercises.check_dp_wire_bytes, "(n - 1) / n * (grad + grad // 4 * elem)", "(n - 1) / n * grad",
     dict(n=4, grad=4096, elem=4, measured=3 / 4 * (4096 + 1024 * 4))),
    (exercises.check_tp_all_reduces, 54, 18, dict(per_microbatch=18, microbatches=3)),
    (exercises.check_sp_all_gathers, 27, 26, dict(measured_per_microbatch=27)),
    (exercises.check_vpp_isends, 12, 16, dict(p=4, v=2, m=4)),
    (exercises.check_pp_bubble, 0.2, 3 / 12, dict(p=4, m=12, ideal=0.2)),
    (exercises.check_cp_kv_gather_bytes, 2048, 4096, dict(measured=2048)),
    (exercises.check_fewer_bytes_dispatcher, "alltoall", "allgather",
     dict(bytes_by_dispatcher={"alltoall": 10, "allgather": 30})),
    (exercises.check_ep_group, [3, 2, 1, 0], [0, 4, 8, 12], dict(truth=[0, 1, 2, 3])),
    (exercises.check_checkpoint_bytes, 12 * 1000, 4 * 1000, dict(measured=12_000, params=1000)),
    (exercises.check_fits, (False, True), (True, True), dict(truth=(False, True), device_gib=80)),
]


@pytest.mark.parametrize("check, right, wrong, kw", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_check_rejects_a_wrong_answer_and_accepts_the_right_one(check, right, wrong, kw, capsys):
    with pytest.raises(exercises.WrongAnswer, match="is not it"):
        check(wrong, **kw)
    assert check(right, **kw) is True
    assert check(None, **kw) is False and "not answered yet" in capsys.readouterr().out


def test_a_formula_cannot_reach_python_builtins():
    with pytest.raises(NameError):
        exercises.check_dp_wire_bytes("__import__('os').getcwd()", n=2, grad=8, elem=4, measured=1.0)
