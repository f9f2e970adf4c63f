"""The device plan's arithmetic: start-ups, compiles, each stage's budget, each call's total, the rerun reserve.

The lease is 15 minutes of device time for everything, a fresh machine's start-up included; no machine starts
with under 4 minutes left, so a rerun of a failed stage is only possible if call 1 leaves at least that much.
Call 1 is capped at 7 minutes so that a first window answers the most before anything optional runs; call 2
(the claims) is fired only when call 1 needs no rerun, and only if it fits what is left. ``plan_lines``
is what ``prepare`` (and ``plan``) prints; ``DevicePlan.fits`` is what the test checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from .plan import CALLS, COMPILE_S_PER_SHAPE, INSTALL_MARGIN_S, call_timeout_s, stage

SESSION_S = 15 * 60
"""Device time of one session, every start-up, idle wait and call together."""
START_UP_S = 90
"""A fresh machine's start (1-2 minutes seen); counted once per fresh machine."""
PER_CALL_LIMIT_S = 600
"""The most one command may run."""
FIRST_CALL_LIMIT_S = 7 * 60
"""Call 1's cap, compiles included: the first window must answer the essentials even if it is the only one."""
RERUN_RESERVE_S = 4 * 60
"""What call 1 must leave: no machine starts with less, and one targeted rerun must fit in it."""


@dataclass(frozen=True)
class CallPlan:
    """One device call of the plan."""

    number: int
    """1-based call number."""
    stages: tuple[str, ...]
    """Stages it runs, in order."""
    timeout_s: int
    """Its ``timeout_s``: stage budgets (work plus compiles) plus the install margin."""
    start_up_s: int
    """Start-up counted before it (a fresh machine for call 1; call 2 counts one too, in case the warm one went)."""


@dataclass(frozen=True)
class DevicePlan:
    """The calls and the session arithmetic."""

    calls: tuple[CallPlan, ...]
    """Every call in order."""
    session_s: int = SESSION_S
    """The session's device time."""

    @property
    def after_first_s(self) -> int:
        """Device time left once call 1 (and its start-up) is spent: the rerun reserve and the later calls."""
        first = self.calls[0]
        return self.session_s - first.start_up_s - first.timeout_s

    def problems(self) -> list[str]:
        """Every rule the plan breaks (none: it fits)."""
        first, found = self.calls[0], []
        if first.timeout_s > FIRST_CALL_LIMIT_S:
            found.append(f"call 1 takes {first.timeout_s} s, over its cap of {FIRST_CALL_LIMIT_S} s")
        if self.after_first_s < RERUN_RESERVE_S:
            found.append(f"call 1 leaves {self.after_first_s} s, under the rerun reserve of {RERUN_RESERVE_S} s")
        for call in self.calls:
            if call.timeout_s > PER_CALL_LIMIT_S:
                found.append(f"call {call.number} takes {call.timeout_s} s, over the per-call {PER_CALL_LIMIT_S} s")
        later = sum(call.start_up_s + call.timeout_s for call in self.calls[1:])
        if later > self.after_first_s:
            found.append(f"calls after the first need {later} s with start-ups, {self.after_first_s} s are left")
        return found

    @property
    def fits(self) -> bool:
        return not self.problems()


def device_plan(calls: tuple[tuple[str, ...], ...] = CALLS) -> DevicePlan:
    """The plan of ``calls`` (default: every stage's ``call``), each counted with a fresh start-up."""
    return DevicePlan(tuple(CallPlan(number, stages, call_timeout_s(stages), START_UP_S)
                            for number, stages in enumerate(calls, 1)))


def _stage_line(name: str) -> str:
    spec = stage(name)
    return (f"    {name:<10} {spec.budget_s:5.0f} s = {spec.run_s:.0f} s work + {spec.compiles} compiles x "
            f"{COMPILE_S_PER_SHAPE} s; stops itself inside it")


def plan_lines(plan: DevicePlan | None = None) -> list[str]:
    """The printed plan: each call's stages and sums, the reserve, and whether it all fits."""
    plan = plan or device_plan()
    lines = [f"Device plan: {plan.session_s} s of device time; a fresh start-up counts {START_UP_S} s; "
             f"call 1 at most {FIRST_CALL_LIMIT_S} s; at least {RERUN_RESERVE_S} s kept for one rerun."]
    for call in plan.calls:
        when = "at once" if call.number == 1 else "only if call 1 needs no rerun"
        lines.append(f"  call {call.number} ({when}): timeout_s {call.timeout_s} = {INSTALL_MARGIN_S} s install "
                     f"and import check + stages; with a start-up {call.start_up_s + call.timeout_s} s")
        lines += [_stage_line(name) for name in call.stages]
    first = plan.calls[0]
    lines.append(f"  after call 1: {plan.session_s} - {first.start_up_s} - {first.timeout_s} = "
                 f"{plan.after_first_s} s left (reserve {RERUN_RESERVE_S} s)")
    later = sum(call.start_up_s + call.timeout_s for call in plan.calls[1:])
    if later:
        lines.append(f"  later calls with start-ups: {later} s; then {plan.after_first_s - later} s spare")
    problems = plan.problems()
    lines.append("  FITS the 15 minutes with the rerun reserve." if not problems
                 else "  DOES NOT FIT: " + "; ".join(problems))
    return lines
