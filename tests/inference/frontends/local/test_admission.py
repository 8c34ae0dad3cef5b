"""AdmissionGate on its own: how long an idle engine holds its first step, from submission times alone."""

import pytest

from inference.frontends.local.admission import AdmissionGate

GAP, MAX = 0.002, 0.05


@pytest.fixture
def gate() -> AdmissionGate:
    return AdmissionGate(gap_s=GAP, max_s=MAX)


def test_nothing_submitted_holds_nothing(gate: AdmissionGate) -> None:
    assert gate.hold_s(100.0) == 0.0
    with gate.expect():  # an announcement alone has nothing to hold
        assert gate.hold_s(100.0) == 0.0


def test_a_lone_request_waits_one_quiet_gap(gate: AdmissionGate) -> None:
    gate.arrived(10.0)
    assert gate.hold_s(10.0) == pytest.approx(GAP)
    assert gate.hold_s(10.0 + GAP / 2) == pytest.approx(GAP / 2)
    assert gate.hold_s(10.0 + GAP) == 0.0


def test_each_submission_within_the_gap_extends_the_burst_up_to_max(gate: AdmissionGate) -> None:
    now = 10.0
    gate.arrived(now)
    while now < 10.0 + MAX - GAP:
        now += GAP * 0.9
        gate.arrived(now)
        assert gate.hold_s(now) > 0
    assert gate.hold_s(10.0 + MAX) == 0.0  # never longer than max_s after the first


def test_announced_callers_hold_past_the_gap_until_they_submit(gate: AdmissionGate) -> None:
    first, second = gate.expect(), gate.expect()
    with first, second:
        gate.arrived(10.0)  # takes one notice
        assert gate.announced == 1
        assert 0 < gate.hold_s(10.0 + 5 * GAP) <= GAP  # polled a gap at a time
        gate.arrived(10.0 + 0.02)
        assert gate.announced == 0
        assert gate.hold_s(10.0 + 0.02 + GAP) == 0.0
    assert gate.announced == 0


def test_an_announcement_never_submitted_holds_at_most_max(gate: AdmissionGate) -> None:
    with gate.expect():
        gate.arrived(10.0)  # someone else's request takes the notice
        with gate.expect():
            assert gate.hold_s(10.0 + MAX / 2) > 0
            assert gate.hold_s(10.0 + MAX) == 0.0
        assert gate.announced == 0  # the notice left on exit
        assert gate.hold_s(10.0 + MAX / 2) == 0.0  # and the quiet gap had long passed


def test_opening_starts_a_new_burst(gate: AdmissionGate) -> None:
    gate.arrived(10.0)
    gate.opened()
    assert gate.hold_s(10.0) == 0.0
    gate.arrived(20.0)  # a burst long after: its own window, not the old one's
    assert gate.hold_s(20.0) == pytest.approx(GAP)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        AdmissionGate(gap_s=-1.0)
