"""The device program's arithmetic: every cost of the 15-minute window, each call's total, the rerun reserve, and
what falls outside the window.

Counted, worst case: a failed H100 start before the H200 fallback (1-2 minutes, once, before the first
machine); for every call a fresh machine's start-up (a later call's warm machine may have gone), the warm idle
after it (the machine stays held ``IDLE_S``) and the close when it goes back; inside each call's ``timeout_s``
the install margin, every stage's compiles (at the estimated or measured seconds per shape) and its overrun past
its budget (``program.STAGE_OVERRUN_S``: the driver's backstop when a stage's own alarm cannot fire inside a C
call). No machine starts with under 4 minutes left, so call 1 must leave that for one rerun; later calls fire
in order while they fit what is left, and those that do not are printed as outside the window (each needs a
window of its own). ``program_lines`` is what ``prepare`` and ``program`` print; ``DeviceProgram.fits`` and
``DeviceProgram.outside`` are what the tests check.
"""

from __future__ import annotations

from dataclasses import dataclass

from .program import CALLS, COMPILE_S_PER_SHAPE, INSTALL_MARGIN_S, STAGE_OVERRUN_S, call_timeout_s, stage

SESSION_S = 15 * 60
"""Device time of one session, every start-up, failed start, idle wait, close and call together."""
START_UP_S = 90
"""A fresh machine's start (1-2 minutes seen); counted for every call."""
FAILED_START_S = 120
"""A failed H100 start before the call goes on to an H200 (1-2 minutes); counted once, before call 1."""
IDLE_S = 30
"""How long a machine stays held (and counted) after each call before it goes back."""
CLOSE_S = 10
"""Giving a machine back; counted once per call, whose machine may be the last."""
PER_CALL_LIMIT_S = 600
"""The most one command may run."""
FIRST_CALL_LIMIT_S = 7 * 60
"""Call 1's cap, compiles included: the first window must answer the essentials even if it is the only one."""
RERUN_RESERVE_S = 4 * 60
"""What call 1 must leave: no machine starts with less, and one targeted rerun must fit in it."""


@dataclass(frozen=True)
class ProgramCall:
    """One device call of the program."""

    number: int
    """1-based call number."""
    stages: tuple[str, ...]
    """Stages it runs, in order."""
    timeout_s: int
    """Its ``timeout_s``: the install margin plus each stage's budget (work and compiles) and overrun."""

    @property
    def cost_s(self) -> int:
        """Device time the call holds: a fresh start-up, its command, the warm idle after it and the close."""
        return START_UP_S + self.timeout_s + IDLE_S + CLOSE_S


@dataclass(frozen=True)
class DeviceProgram:
    """The calls and the session arithmetic."""

    calls: tuple[ProgramCall, ...]
    """Every call in order."""
    compile_s: float = COMPILE_S_PER_SHAPE
    """Seconds counted per compiled shape (the estimate, or what call 1 measured)."""
    session_s: int = SESSION_S
    """The session's device time."""

    @property
    def after_first_s(self) -> int:
        """Device time left once a failed start and call 1 (start-up, command, idle, close) are spent."""
        return self.session_s - FAILED_START_S - self.calls[0].cost_s

    def later(self) -> tuple[list[ProgramCall], list[ProgramCall]]:
        """(calls after the first that fit what is left, in order; those that fall outside the window)."""
        left, inside, outside = self.after_first_s, [], []
        for call in self.calls[1:]:
            if call.cost_s <= left:
                inside.append(call)
                left -= call.cost_s
            else:
                outside.append(call)
        return inside, outside

    @property
    def outside(self) -> list[ProgramCall]:
        return self.later()[1]

    def problems(self) -> list[str]:
        """Every rule the program breaks (none: it fits)."""
        first, found = self.calls[0], []
        if first.timeout_s > FIRST_CALL_LIMIT_S:
            found.append(f"call 1 takes {first.timeout_s} s, over its cap of {FIRST_CALL_LIMIT_S} s")
        if self.after_first_s < RERUN_RESERVE_S:
            found.append(f"call 1 leaves {self.after_first_s} s, under the rerun reserve of {RERUN_RESERVE_S} s")
        for call in self.calls:
            if call.timeout_s > PER_CALL_LIMIT_S:
                found.append(f"call {call.number} takes {call.timeout_s} s, over the per-call {PER_CALL_LIMIT_S} s")
        return found

    @property
    def fits(self) -> bool:
        return not self.problems()


def measured_compile_s(payload: dict, source: str) -> float:
    """Seconds per compiled shape that call 1's gpu_check measured (``device_check.json`` of that call);
    ValueError naming ``source`` where it has none."""
    result = payload.get("stages", {}).get("gpu_check", {}).get("result") or {}
    value = result.get("compile_s_per_shape")
    if not value:
        raise ValueError(f"{source}: no stages.gpu_check.result.compile_s_per_shape (gpu_check did not finish "
                         "its warm-up there); pass --compile-s instead")
    return float(value)


def device_program(calls: tuple[tuple[str, ...], ...] = CALLS, compile_s: float = COMPILE_S_PER_SHAPE) -> DeviceProgram:
    """The program of ``calls`` (default: every stage's ``call``) with compiles at ``compile_s`` each."""
    return DeviceProgram(tuple(ProgramCall(number, stages, call_timeout_s(stages, compile_s))
                            for number, stages in enumerate(calls, 1)), compile_s)


def _stage_line(name: str, compile_s: float) -> str:
    spec = stage(name)
    return (f"    {name:<10} {spec.budget(False, compile_s):5.0f} s = {spec.run_s:.0f} s work + {spec.compiles} "
            f"compiles x {compile_s:g} s; stops itself inside it, ended at most {STAGE_OVERRUN_S} s past it")


def _call_lines(call: ProgramCall, when: str, compile_s: float) -> list[str]:
    return [f"  call {call.number} ({when}): {call.cost_s} s = start-up {START_UP_S} + timeout_s {call.timeout_s} "
            f"+ idle {IDLE_S} + close {CLOSE_S}; timeout_s = {INSTALL_MARGIN_S} s install and import check + "
            f"stages with their overruns",
            *(_stage_line(name, compile_s) for name in call.stages)]


def _outside_lines(program: DeviceProgram, left: int) -> list[str]:
    return [f"  OUTSIDE THE WINDOW: call {call.number} ({', '.join(call.stages)}) needs {call.cost_s} s, {left} s "
            f"are left; it needs a window of its own ({FAILED_START_S} + {call.cost_s} = "
            f"{FAILED_START_S + call.cost_s} s of {program.session_s})" for call in program.outside]


def program_lines(program: DeviceProgram | None = None) -> list[str]:
    """The printed program: every cost of the window, each call's stages and sums, the reserve, what falls outside
    the window, and whether it all fits."""
    program = program or device_program()
    source = "the estimate" if program.compile_s == COMPILE_S_PER_SHAPE else "measured"
    lines = [f"Device program: {program.session_s} s of device time, every cost counted at its worst; compiles at "
             f"{program.compile_s:g} s per shape ({source}; call 1's gpu_check measures it: `program --measured "
             f"OUT/device_check.json`); call 1 at most {FIRST_CALL_LIMIT_S} s; {RERUN_RESERVE_S} s kept for one "
             f"rerun.", f"  a failed H100 start before the H200 fallback: {FAILED_START_S} s (once)"]
    lines += _call_lines(program.calls[0], "at once", program.compile_s)
    lines.append(f"  after call 1: {program.session_s} - {FAILED_START_S} - {program.calls[0].cost_s} = "
                 f"{program.after_first_s} s left (reserve {RERUN_RESERVE_S} s)")
    inside, _ = program.later()
    for call in inside:
        lines += _call_lines(call, "only if call 1 needs no rerun", program.compile_s)
    left = program.after_first_s - sum(call.cost_s for call in inside)
    if inside:
        lines.append(f"  then {left} s spare")
    lines += _outside_lines(program, left)
    problems = program.problems()
    lines.append("  FITS the 15 minutes with the rerun reserve." if not problems
                 else "  DOES NOT FIT: " + "; ".join(problems))
    return lines
