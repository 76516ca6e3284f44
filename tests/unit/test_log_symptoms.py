"""The symptoms of a Megatron-LM run gone wrong, found in its log (helpers/rundir/log_symptoms.py): the
real healthy log shows none; the same log with one line changed the way each failure prints shows
that symptom, at that iteration; the letters of lesson 19's logs are fixed by their seed (the
notebook suite's answer depends on them)."""
import re

import pytest

from helpers.rundir import log_symptoms

HEALTHY = (log_symptoms.LOG_DIR / log_symptoms.HEALTHY).read_text()


def edited(change) -> str:
    """The healthy log after `change(iteration, line)` rewrote its iteration lines."""
    out = []
    for line in HEALTHY.splitlines():
        m = re.search(r" iteration +(\d+)/", line)
        out.append(change(int(m.group(1)), line) if m else line)
    return "\n".join(out)


def test_the_healthy_log_shows_no_symptom():
    assert log_symptoms.give_away(HEALTHY) is None


def times(factor, first, last):
    return lambda i, line: re.sub(r"\(ms\): (\S+)", lambda m: f"(ms): {factor * float(m.group(1)):.1f}", line) \
        if first <= i <= last else line


@pytest.mark.parametrize("change, symptom, at", [
    (lambda i, line: re.sub(r" lm loss: \S+ \|", "", line).replace("nan iterations:   0", "nan iterations:   1")
     if i == 15 else line, "NaN", 15),
    (lambda i, line: line.replace("skipped iterations:   0", "skipped iterations:   1").replace("loss scale: 1.0",
                                                                                                  "loss scale: 0.5")
     if i == 4 else line, "skipped iterations", 4),
    (lambda i, line: re.sub(r"lm loss: (\S+)", lambda m: f"lm loss: {2 * float(m.group(1)):.6E}", line)
     if i == 14 else line, "loss spike", 14),
    (times(2.0, 4, 8), "throughput drop", 4),  # five slow iterations before the save at 10
])
def test_each_symptom_is_found_at_its_line(change, symptom, at):
    found = log_symptoms.give_away(edited(change))
    assert found is not None and found[:2] == (symptom, at), found


def test_below_the_thresholds_is_not_a_symptom():
    assert log_symptoms.give_away(edited(times(1.25, 4, 8))) is None  # under SLOW (1.3x the steady time)
    assert log_symptoms.give_away(edited(times(2.0, 4, 7))) is None  # four iterations: under SLOW_RUN
    # slower from the checkpoint save on (iteration 10) is the save's own work, however slow
    assert log_symptoms.give_away(edited(times(2.0, 11, 20))) is None
    small = edited(lambda i, line: re.sub(r"lm loss: (\S+)", lambda m: f"lm loss: {1.2 * float(m.group(1)):.6E}",
                                          line) if i == 14 else line)
    assert log_symptoms.give_away(small) is None


@pytest.mark.parametrize("name, symptom, at", [
    ("loss_spike.log", "loss spike", 11), ("skipped_iterations.log", "skipped iterations", 1),
    ("nan.log", "NaN", 3), ("nan_unchecked.log", "NaN", 2), ("throughput_drop.log", "throughput drop", 14)])
def test_each_real_log_shows_what_it_was_captured_for(name, symptom, at):
    """The real logs of data/megatron_lm_logs/ (benchmarks/megatron_lm/log_gallery.py on one H100)."""
    text = (log_symptoms.LOG_DIR / name).read_text()
    found = log_symptoms.give_away(text)
    assert found is not None and found[:2] == (symptom, at), found
    if name == "nan.log":  # Megatron-LM's default NaN check: its result validation logs the rejected loss and
        # stops the run before that iteration's line is printed (megatron/core/rerun_state_machine.py)
        assert "found NaN in local forward loss calculation" in found[2]
        assert not re.search(rf" iteration +{at}/", text)


def test_the_letters_are_fixed_and_only_present_logs_count(tmp_path):
    assert log_symptoms.letters() == {"A": "nan.log", "B": "throughput_drop.log", "C": "skipped_iterations.log",
                                      "D": "loss_spike.log"}
    assert set(log_symptoms.letters().values()) == set(log_symptoms.LOGS)
    assert log_symptoms.present(tmp_path) == {}
    (tmp_path / "loss_spike.log").write_text(HEALTHY)
    assert log_symptoms.present(tmp_path) == {"D": tmp_path / "loss_spike.log"}
