"""The recording and fault fields (log_interval, capture_tensors_at, torch_profile, faults) are
checked before any process starts: each rule of helpers/job/rules/debug.py fires on its bad value,
alone, with its name and a fix, and a job asking for what can happen passes them all."""
import re
from pathlib import Path

import pytest

from helpers.job import faults, rules
from helpers.job.rules import debug
from helpers.job.rules.environment import Environment
from helpers.job.spec import JobSpec

GPU = Environment(cuda_devices=2)


def found(spec: JobSpec, env: Environment = rules.CPU_ONLY) -> list:
    return [v for v in rules.check(rules.resolve(spec, env), env).violations if v.category == "debug"]


def saved_checkpoint(tmp_path: Path, iteration: int) -> str:
    """A checkpoints/ folder whose Megatron-LM tracker names <iteration> (all the fault rule reads)."""
    root = tmp_path / "checkpoints"
    (root / f"iter_{iteration:07d}").mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return str(root)


CASES = {  # rule -> (the job that breaks it alone, the environment)
    "log_interval_positive": (dict(log_interval=0), rules.CPU_ONLY),
    "capture_tensors_at_outside_run": (dict(iters=3, capture_tensors_at=4), rules.CPU_ONLY),
    "torch_profile_needs_cuda": (dict(torch_profile="profile.txt"), rules.CPU_ONLY),
    "torch_profile_needs_iters": (dict(device="cuda", iters=2, torch_profile="profile.txt"), GPU),
    "torch_profile_folder_missing": (dict(device="cuda", torch_profile="no/such/folder/profile.txt"), GPU),
    "faults_not_a_list": (dict(faults="nan@2"), rules.CPU_ONLY),
    "fault_format": (dict(faults=["nan"]), rules.CPU_ONLY),
    "fault_unknown_kind": (dict(faults=["segfault@2"]), rules.CPU_ONLY),
    "fault_iteration_outside_run": (dict(iters=3, faults=["raise@4"]), rules.CPU_ONLY),
    "fault_rank_outside_world": (dict(tp=2, faults=["raise@2:rank2"]), rules.CPU_ONLY),
    "fault_not_at_a_save": (dict(iters=4, save_interval=2, faults=["hang_during_save@3"]), rules.CPU_ONLY),
    "fault_load_without_load_dir": (dict(faults=["hang_during_load@2"]), rules.CPU_ONLY),
}


@pytest.mark.parametrize("rule", CASES)
def test_each_rule_fires_alone_by_name_with_a_fix(rule, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # torch_profile paths are resolved against the working directory
    job, env = CASES[rule]
    violations = found(JobSpec(**job), env)
    assert [v.name for v in violations] == [rule], violations
    assert violations[0].fix and str(violations[0]).startswith(f"[{rule}]")


def test_a_load_fault_must_name_the_loaded_iteration(tmp_path):
    load_dir = saved_checkpoint(tmp_path, 2)
    assert [v.name for v in debug.check(JobSpec(iters=4, load_dir=load_dir, faults=["hang_during_load@3"]))] == \
        ["fault_load_iteration_not_loaded"]
    assert debug.check(JobSpec(iters=4, load_dir=load_dir, faults=["hang_during_load@2:rank0"])) == []


def test_a_resumed_job_trains_from_the_iteration_after_its_checkpoint(tmp_path):
    load_dir = saved_checkpoint(tmp_path, 2)
    late = debug.check(JobSpec(iters=4, load_dir=load_dir, faults=["raise@2"], capture_tensors_at=1))
    assert [v.name for v in late] == ["capture_tensors_at_outside_run", "fault_iteration_outside_run"]
    assert "resuming from iteration 2" in late[1].message and "from 3 to 4" in late[1].fix
    assert debug.check(JobSpec(iters=4, load_dir=load_dir, faults=["raise@3"], capture_tensors_at=4)) == []


def test_every_rule_of_the_module_is_listed_here():
    names = set(re.findall(r'v\.add\("(\w+)"', Path(debug.__file__).read_text()))
    assert names == set(CASES) | {"fault_load_iteration_not_loaded"}


def test_jobs_asking_for_what_can_happen_pass(tmp_path):
    ok = [JobSpec(log_interval=5, iters=10, capture_tensors_at=10),
          JobSpec(tp=2, iters=3, save_interval=1, faults=["raise@2:rank1", "nan@3", "killjob_during_save@2:rank0",
                                                          "exit@1", "hang@3:rank1", "exit_during_save@3"]),
          JobSpec(device="cuda", iters=3, torch_profile=str(tmp_path / "profile.txt"), torch_profile_mode="device")]
    for spec in ok:
        assert found(spec, GPU if spec.device == "cuda" else rules.CPU_ONLY) == [], spec


def test_the_fault_grammar():
    assert faults.parse("hang_during_save@1:rank3") == faults.Fault("hang_during_save", 1, 3)
    assert faults.parse("nan@2").rank is None and faults.parse("nan@2").event is None
    assert faults.parse("exit_during_load@4").event == "load"
    assert str(faults.parse("raise@2:rank1")) == "raise@2:rank1"
    for bad in ("nan", "nan@x", "raise@2:1", "@2", 3):
        with pytest.raises(ValueError):
            faults.parse(bad)


def test_instruments_auto_is_on_for_cpu_and_off_for_cuda():
    assert rules.resolve(JobSpec(), rules.CPU_ONLY).spec.instruments == "on"
    assert rules.resolve(JobSpec(device="cuda"), GPU).spec.instruments == "off"
    assert rules.resolve(JobSpec(device="cuda", instruments="on"), GPU).spec.instruments == "on"
