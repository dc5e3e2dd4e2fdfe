"""Causal diagnosis: find the injected cause of a change in an advertising campaign, and where.

The intervention-injected simulator (docs/method.md, "Intervention-injected diagnosis
environments"). A campaign runs a baseline window and an equal intervention window over segments
(placement × device × region × audience). Daily impressions N ~ Poisson(μ·η_t·V); the segment split
~ Dirichlet-Multinomial(N, α·π); clicks, orders ~ Binomial with per-segment CTR/CVR rates, spend =
clicks·CPC·noise; one of 12 causes is injected (campaign-wide, segment-mix, segment-specific, or
NO_SIGNAL) on a driver slice of 1-2 dimensions with an immediate, delayed or ramping onset, plus
smaller confounding drifts. The agent sees DuckDB tables (daily_campaign, segment_daily,
budget_log, inventory) through one SELECT-only SQL tool with external access off (output cut at
8,000 characters; each query interrupted after `SQLLimits.timeout_s`, DuckDB's memory capped at
`SQLLimits.memory_mb`, no spilling to disk: a runaway query is an error observation and the episode
goes on); the label stays hidden. Every episode passes the verifier, which reads only the visible
data: the signal is detectable (z ≥ 3 in the late half of the window), strong (SNR ≥ 1 over the
largest confounder in the same metric) and distinguishable (a rule-based diagnoser recovers exactly
the true cause and slice); others are regenerated.
Reward: 0.65·r_attr + 0.30·r_full + 0.05·r_fmt, r_attr = 1[cause]·(0.5 + 0.5·Jaccard(slice)).
Knobs: effect size, confounders, daily volume, window length. The prompt varies only with the
window length (its day ranges): all twelve causes occur at every rung of the ladder, and one SQL
tool serves them all.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tracegym.config import option
from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.cache import BoundedCache
from tracegym.synth_envs.common import call, json_object
from tracegym.synth_envs.registry import register
from tracegym.synth_envs.tools import tool
from tracegym.synth_envs.watchdog import WATCHDOG

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "placement": ("feed", "search", "video"),
    "device": ("mobile", "desktop", "tablet"),
    "region": ("na", "eu", "apac"),
    "audience": ("new", "returning", "lookalike"),
}
DIMS = tuple(DIMENSIONS)
CAMPAIGN_WIDE = ("BID_INCREASE", "BUDGET_CAP", "PAGE_DEGRADATION", "OUT_OF_STOCK")
SEGMENT_MIX = ("PLACEMENT_SHIFT", "TARGETING_BROADENING", "TARGETING_NARROWING")
SEGMENT_SPECIFIC = ("CREATIVE_FATIGUE", "COMPETITIVE_PRESSURE", "AD_QUALITY_DROP", "AUDIENCE_SATURATION")
CAUSES = CAMPAIGN_WIDE + SEGMENT_MIX + SEGMENT_SPECIFIC + ("NO_SIGNAL",)
# the metric whose change identifies each segment-specific cause
PRIMARY = {
    "CREATIVE_FATIGUE": "ctr",
    "COMPETITIVE_PRESSURE": "cpc",
    "AD_QUALITY_DROP": "ctr",
    "AUDIENCE_SATURATION": "cvr",
}
SHAPE = tuple(len(v) for v in DIMENSIONS.values())
PAIRS = tuple(itertools.combinations(range(4), 2))
SQL_LIMIT = 8_000

Slice = tuple[tuple[str, str], ...]


@dataclass
class Config:
    """Difficulty knobs: effect size (relative change), confounding drifts, impressions/day, days per window."""

    effect_size: float = 0.4
    n_confounders: int = 2
    daily_impressions: int = 400_000
    window_days: int = 7


@dataclass(frozen=True)
class SQLLimits:
    """Limits of the agent's queries (not difficulty knobs: they bound the machine, not the task)."""

    timeout_s: float = option(2.0, "wall-clock seconds one query may run before it is interrupted")
    memory_mb: int = option(256, "DuckDB memory limit of the process's database, MiB (all episodes share it)")


@dataclass(frozen=True)
class _World:
    tables: dict[str, dict[str, np.ndarray]]
    cause: str
    slice: Slice
    onset: str
    problem: str | None  # why the verifier rejects this episode (None: accepted)


def _mask(slice_: Slice) -> np.ndarray:
    """Boolean (3,3,3,3) mask of the segments in a slice (all segments for the empty slice)."""
    mask = np.ones(SHAPE, dtype=bool)
    for dim, value in slice_:
        axis = DIMS.index(dim)
        keep = np.zeros(SHAPE[axis], dtype=bool)
        keep[DIMENSIONS[dim].index(value)] = True
        shape = [1, 1, 1, 1]
        shape[axis] = SHAPE[axis]
        mask &= keep.reshape(shape)
    return mask


def _simulate(rng: np.random.Generator, cfg: Config) -> tuple[dict[str, dict[str, np.ndarray]], str, Slice, str]:
    """Draw one campaign with one injected cause; returns the visible tables and the hidden label."""
    window = cfg.window_days
    days = 2 * window
    cause = CAUSES[rng.integers(len(CAUSES))]
    onset = ("immediate", "delayed", "ramping")[rng.integers(3)]
    if cause in CAMPAIGN_WIDE or cause == "NO_SIGNAL":
        slice_: Slice = ()
    elif cause in SEGMENT_MIX:
        dim = "placement" if cause == "PLACEMENT_SHIFT" else "audience"
        slice_ = ((dim, DIMENSIONS[dim][rng.integers(3)]),)
    else:
        dims = sorted(rng.choice(4, size=int(rng.integers(1, 3)), replace=False))
        slice_ = tuple((DIMS[d], DIMENSIONS[DIMS[d]][rng.integers(3)]) for d in dims)
    # onset profile over the intervention window: 0 before, 1 at full strength
    profile = np.zeros(days)
    t = np.arange(window)
    start = int(rng.integers(1, window // 2 + 1)) if onset == "delayed" else 0
    profile[window:] = (t >= start) if onset != "ramping" else np.clip((t + 1) / (window * 0.6), 0, 1)
    effect = cfg.effect_size * (0.9 + 0.2 * rng.random())
    in_slice = _mask(slice_)

    share = np.ones(SHAPE)
    for axis in range(4):
        part = rng.dirichlet(np.full(3, 6.0))
        shape = [1, 1, 1, 1]
        shape[axis] = 3
        share = share * part.reshape(shape)
    log_rates = {
        m: np.log(base) + rng.normal(0, 0.15, SHAPE) for m, base in (("ctr", 0.03), ("cvr", 0.08), ("cpc", 0.9))
    }
    # per day multipliers: (days, 3,3,3,3) for rates and mix, (days,) for volume
    mult = {m: np.ones((days,) + SHAPE) for m in ("ctr", "cvr", "cpc", "mix")}
    volume = np.ones(days)
    p = profile[:, None, None, None, None]
    sign = {"ctr": -1, "cvr": -1, "cpc": 1, "mix": 1}

    def hit(metric: str, where: np.ndarray, size: float) -> None:
        mult[metric] = mult[metric] * np.where(where, np.exp(sign[metric] * size * p), 1.0)

    strength = np.log1p(effect)
    everywhere = np.ones(SHAPE, dtype=bool)
    if cause == "BID_INCREASE":
        hit("cpc", everywhere, strength)
        volume = volume * np.exp(strength * profile)
    elif cause == "BUDGET_CAP":
        volume = volume * np.exp(-strength * profile)
    elif cause in ("PAGE_DEGRADATION", "OUT_OF_STOCK"):
        hit("cvr", everywhere, strength)
    elif cause in SEGMENT_MIX:
        hit("mix", in_slice, 2 * strength)
        if cause != "PLACEMENT_SHIFT":
            volume = volume * np.exp((1 if cause == "TARGETING_BROADENING" else -1) * strength * profile)
    elif cause == "CREATIVE_FATIGUE":
        hit("ctr", in_slice, strength)
    elif cause == "AD_QUALITY_DROP":
        hit("ctr", in_slice, strength)
        hit("cpc", in_slice, strength)
    elif cause == "COMPETITIVE_PRESSURE":
        hit("cpc", in_slice, strength)
        mult["mix"] = mult["mix"] * np.where(in_slice, np.exp(-strength * p), 1.0)
    elif cause == "AUDIENCE_SATURATION":
        hit("cvr", in_slice, strength)
    for _ in range(cfg.n_confounders):  # smaller drifts on random one-dimensional slices
        dim = int(rng.integers(4))
        where = _mask(((DIMS[dim], DIMENSIONS[DIMS[dim]][rng.integers(3)]),))
        metric = ("ctr", "cvr", "cpc")[rng.integers(3)]
        size = strength * rng.uniform(0.1, 0.4) * (1 if rng.random() < 0.5 else -1)
        mult[metric] = mult[metric] * np.where(
            where,
            np.exp(
                sign[metric] * size * np.clip(np.arange(days) - window + 1, 0, None)[:, None, None, None, None] / window
            ),
            1.0,
        )

    season = 1 + 0.06 * np.sin(2 * np.pi * np.arange(days) / 7 + rng.uniform(0, 2 * np.pi))
    total = rng.poisson(cfg.daily_impressions * season * volume)
    mix = share[None] * mult["mix"]
    mix = (mix / mix.sum(axis=(1, 2, 3, 4), keepdims=True)).reshape(days, -1)
    split = np.stack([rng.multinomial(total[d], rng.dirichlet(400 * mix[d] + 1e-9)) for d in range(days)]).reshape(
        (days,) + SHAPE
    )
    ctr = np.clip(np.exp(log_rates["ctr"])[None] * mult["ctr"], 0, 1)
    cvr = np.clip(np.exp(log_rates["cvr"])[None] * mult["cvr"], 0, 1)
    clicks = rng.binomial(split, ctr)
    orders = rng.binomial(clicks, cvr)
    spend = np.round(
        clicks * np.exp(log_rates["cpc"])[None] * mult["cpc"] * np.exp(rng.normal(0, 0.03, clicks.shape)), 2
    )

    budget = np.full(days, float(np.round(spend[:window].sum() / window * 1.5, -2)))
    if cause == "BUDGET_CAP":
        budget = np.where(profile > 0, np.round(budget * np.exp(-strength * profile), -2), budget)
    stock = np.clip(0.97 + rng.normal(0, 0.01, days), 0, 1)
    if cause == "OUT_OF_STOCK":
        stock = np.clip(stock - 0.5 * profile, 0, 1)

    grid = np.array(list(itertools.product(*DIMENSIONS.values())))
    seg = {"day": np.repeat(np.arange(days), grid.shape[0])}
    for column, dim in enumerate(DIMS):
        seg[dim] = np.tile(grid[:, column], days)
    for name, values in (("impressions", split), ("clicks", clicks), ("orders", orders), ("spend", spend)):
        seg[name] = values.reshape(days, -1).reshape(-1)
    campaign = {
        "day": np.arange(days),
        "impressions": split.sum(axis=(1, 2, 3, 4)),
        "clicks": clicks.sum(axis=(1, 2, 3, 4)),
        "orders": orders.sum(axis=(1, 2, 3, 4)),
        "spend": np.round(spend.sum(axis=(1, 2, 3, 4)), 2),
    }
    tables = {
        "daily_campaign": campaign,
        "segment_daily": seg,
        "budget_log": {"day": np.arange(days), "daily_budget": budget},
        "inventory": {"day": np.arange(days), "in_stock_share": np.round(stock, 3)},
    }
    return tables, cause, slice_, onset


def _cube(tables: dict[str, dict[str, np.ndarray]], window: int) -> dict[str, np.ndarray]:
    """Visible segment data as (days, 3,3,3,3) arrays."""
    seg = tables["segment_daily"]
    days = 2 * window
    return {m: seg[m].reshape((days,) + SHAPE).astype(float) for m in ("impressions", "clicks", "orders", "spend")}


def _changes(
    cube: dict[str, np.ndarray], window: int, axes: tuple[int, ...]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Log change (late half of the intervention window vs baseline) and its z-score, per slice.

    Slices are the cells left after summing over the other dimension axes. CTR and CVR changes
    are pooled ratios with binomial noise (var ≈ 1/events per window); CPC, impressions and
    impression share use the day-to-day spread of their daily log value in the baseline window.
    """
    keep = tuple(a + 1 for a in axes)
    drop = tuple(a for a in range(1, 5) if a not in keep)
    sums = {m: v.sum(axis=drop) if drop else v for m, v in cube.items()}
    base, late = slice(0, window), slice(window + window // 2, 2 * window)
    spread = np.sqrt(1 / window + 1 / (window - window // 2))
    change, z = {}, {}
    for metric, (num, den) in {
        "ctr": ("clicks", "impressions"),
        "cvr": ("orders", "clicks"),
        "cpc": ("spend", "clicks"),
    }.items():
        n_base, d_base = np.maximum(sums[num][base].sum(axis=0), 1.0), np.maximum(sums[den][base].sum(axis=0), 1.0)
        n_late, d_late = np.maximum(sums[num][late].sum(axis=0), 1.0), np.maximum(sums[den][late].sum(axis=0), 1.0)
        change[metric] = np.log(n_late / d_late) - np.log(n_base / d_base)
        if metric == "cpc":
            daily = np.log(np.maximum(sums[num], 1e-9) / np.maximum(sums[den], 1.0))
            noise = daily[base].std(axis=0, ddof=1) * spread + 1e-6
        else:
            noise = np.sqrt(1 / n_base + 1 / n_late)
        z[metric] = change[metric] / noise
    total = cube["impressions"].sum(axis=(1, 2, 3, 4)).reshape((-1,) + (1,) * len(axes))
    for metric, daily in (("imp", sums["impressions"]), ("share", sums["impressions"] / total)):
        logs = np.log(np.maximum(daily, 1e-9))
        change[metric] = logs[late].mean(axis=0) - logs[base].mean(axis=0)
        z[metric] = change[metric] / (logs[base].std(axis=0, ddof=1) * spread + 1e-6)
    return change, z


def _diagnose(tables: dict[str, dict[str, np.ndarray]], window: int, threshold: float) -> tuple[str, Slice]:
    """The rule-based diagnoser the verifier runs on the visible tables (cause, slice).

    Levels are tested coarse to fine: budget and inventory logs, then each rate metric over the
    twelve one-dimensional slices (all moved: campaign-wide; exactly one: that slice), then over
    the 54 two-dimensional cells (exactly one moved: that cell), then impression-share shifts.
    Anything else is AMBIGUOUS, which the verifier rejects.
    """
    budget, stock = tables["budget_log"]["daily_budget"], tables["inventory"]["in_stock_share"]
    if budget[window:].min() < budget[:window].min() * 0.95:
        return "BUDGET_CAP", ()
    if stock[window:].min() < stock[:window].min() - 0.1:
        return "OUT_OF_STOCK", ()
    cube = _cube(tables, window)
    overall, _ = _changes(cube, window, ())
    singles = [_changes(cube, window, (axis,)) for axis in range(4)]
    pairs = [_changes(cube, window, pair) for pair in PAIRS]
    sign = {"ctr": -1, "cvr": -1, "cpc": 1}

    def moved(levels: list, groups: tuple, metric: str) -> list[Slice]:
        found = []
        for axes, (change, z) in zip(groups, levels):
            mask = (sign[metric] * change[metric] > threshold) & (sign[metric] * z[metric] > 3)
            for cell in zip(*np.nonzero(mask)):
                found.append(tuple((DIMS[a], DIMENSIONS[DIMS[a]][i]) for a, i in zip(axes, cell)))
        return found

    located: dict[str, Slice] = {}
    for metric in ("ctr", "cvr", "cpc"):
        ones = moved(singles, tuple((a,) for a in range(4)), metric)
        if len(ones) >= 10:
            located[metric] = ()
        elif len(ones) == 1:
            located[metric] = ones[0]
        elif ones:
            return "AMBIGUOUS", ()
        else:
            twos = moved(pairs, PAIRS, metric)
            if len(twos) == 1:
                located[metric] = twos[0]
            elif twos:
                return "AMBIGUOUS", ()
    if located.get("cpc") == () and set(located) == {"cpc"}:
        return ("BID_INCREASE", ()) if overall["imp"][()] > threshold else ("AMBIGUOUS", ())
    if located.get("cvr") == () and set(located) == {"cvr"}:
        return "PAGE_DEGRADATION", ()
    if any(s == () for s in located.values()):
        return "AMBIGUOUS", ()
    if "ctr" in located:
        if set(located) == {"ctr"}:
            return "CREATIVE_FATIGUE", located["ctr"]
        if set(located) == {"ctr", "cpc"} and located["cpc"] == located["ctr"]:
            return "AD_QUALITY_DROP", located["ctr"]
        return "AMBIGUOUS", ()
    if set(located) == {"cpc"}:
        return "COMPETITIVE_PRESSURE", located["cpc"]
    if set(located) == {"cvr"}:
        return "AUDIENCE_SATURATION", located["cvr"]
    if located:
        return "AMBIGUOUS", ()
    for dim in ("placement", "audience"):
        change, z = singles[DIMS.index(dim)]
        up = np.nonzero((change["share"] > threshold) & (z["share"] > 3))[0]
        if len(up) == 1:
            slice_ = ((dim, DIMENSIONS[dim][up[0]]),)
            if dim == "placement":
                return "PLACEMENT_SHIFT", slice_
            direction = overall["imp"][()]
            if abs(direction) > threshold / 2:
                return ("TARGETING_BROADENING" if direction > 0 else "TARGETING_NARROWING"), slice_
            return "AMBIGUOUS", ()
        if len(up) > 1:
            return "AMBIGUOUS", ()
    return "NO_SIGNAL", ()


def _strength_problem(tables: dict[str, dict[str, np.ndarray]], window: int, cause: str, slice_: Slice) -> str | None:
    """Detectability (z ≥ 3) and SNR ≥ 1 over the largest disjoint-slice change of the primary metric."""
    if cause not in PRIMARY:
        return None
    metric, sign = PRIMARY[cause], (1 if PRIMARY[cause] == "cpc" else -1)
    cube = _cube(tables, window)
    axes = tuple(sorted(DIMS.index(d) for d, _ in slice_))
    change, z = _changes(cube, window, axes)
    cell = tuple(DIMENSIONS[d].index(v) for d, v in sorted(slice_, key=lambda kv: DIMS.index(kv[0])))
    signal = sign * change[metric][cell]
    if sign * z[metric][cell] < 3:
        return f"signal not detectable: z={sign * z[metric][cell]:.2f}"
    others = np.abs(change[metric]).copy()
    others[cell] = 0
    for axis, index in enumerate(cell):  # cells sharing a value with the slice carry part of its effect
        view = [slice(None)] * len(cell)
        view[axis] = index
        others[tuple(view)] = 0
    confounder = float(others.max()) if others.size else 0.0
    if signal < max(confounder, 1e-9):
        return f"SNR {signal / max(confounder, 1e-9):.2f} < 1 against the largest confounder"
    return None


class _Databases:
    """One process-wide in-memory DuckDB; each episode's tables are Arrow views on its own cursor.

    Episodes share the connection (connecting is slow); a cursor's registered views are visible to
    that cursor only, so an episode sees its own tables and no other's, and registering copies
    nothing (docs/engineering.md, "synth_envs"). The agent can read
    but never write: views over Arrow data cannot be modified, every query must be one SELECT,
    and external access (files, network, extensions) is off with the configuration locked. The
    last `keep` episodes stay registered.
    """

    def __init__(self, limits: SQLLimits, keep: int = 8) -> None:
        self.limits = limits
        self.keep = keep
        self.connection: Any = None
        self.cursors: dict[Hashable, Any] = {}

    def cursor(self, key: Hashable, tables: dict[str, dict[str, np.ndarray]]) -> Any:
        """The cursor with the episode `key`'s tables registered (registered now if new)."""
        import duckdb
        import pyarrow as pa

        if self.connection is None:
            self.connection = duckdb.connect(
                ":memory:",
                config={"threads": 1, "memory_limit": f"{self.limits.memory_mb}MB", "max_temp_directory_size": "0B"},
            )
            self.connection.execute("SET enable_external_access = false")
            self.connection.execute("SET lock_configuration = true")
        if key not in self.cursors:
            cursor = self.connection.cursor()
            for table, columns in tables.items():
                cursor.register(table, pa.table(columns))
            self.cursors[key] = cursor
            while len(self.cursors) > self.keep:
                self.cursors.pop(next(iter(self.cursors))).close()
        return self.cursors[key]


def _run_sql(cursor: Any, query: str, timeout_s: float) -> str:
    """Run one read-only query, interrupted after `timeout_s` seconds; the text result
    (CSV-like), cut at SQL_LIMIT characters. Errors, the time limit included, raise ToolError."""
    import duckdb

    try:
        statements = cursor.extract_statements(query)
    except duckdb.Error as error:
        raise ToolError(f"SQL error: {str(error).splitlines()[0]}") from None
    if len(statements) != 1 or statements[0].type.name != "SELECT":
        raise ToolError("only one read-only SELECT statement per call is allowed")
    try:
        with WATCHDOG.guard(cursor.interrupt, timeout_s):
            result = cursor.execute(query)
            header = [d[0] for d in result.description]
            rows = result.fetchmany(2_000)
    except duckdb.InterruptException:
        raise ToolError(f"SQL error: the query ran past the {timeout_s:g} s time limit and was stopped") from None
    except duckdb.Error as error:
        raise ToolError(f"SQL error: {str(error).splitlines()[0]}") from None
    lines = [",".join(header)] + [",".join(_cell(v) for v in row) for row in rows]
    text = "\n".join(lines)
    return text if len(text) <= SQL_LIMIT else text[:SQL_LIMIT] + "\n...[output cut at 8000 characters]"


def _cell(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _slice_sql(window: int) -> str:
    late = window + window // 2
    sets = ", ".join(f"(period, {DIMS[a]}, {DIMS[b]})" for a, b in PAIRS)
    return (
        f"SELECT period, {', '.join(DIMS)}, round(sum(clicks)/sum(impressions), 5) AS ctr, "
        "round(sum(orders)/sum(clicks), 4) AS cvr, round(sum(spend)/sum(clicks), 3) AS cpc "
        f"FROM (SELECT *, CASE WHEN day < {window} THEN 'base' ELSE 'late' END AS period FROM segment_daily "
        f"WHERE day < {window} OR day >= {late}) GROUP BY GROUPING SETS ({sets}) ORDER BY ALL"
    )


def _mix_sql(window: int) -> str:
    late = window + window // 2
    return (
        f"SELECT CASE WHEN day < {window} THEN 'base' ELSE 'late' END AS period, placement, audience, "
        "sum(impressions) AS impressions FROM segment_daily "
        f"WHERE day < {window} OR day >= {late} "
        "GROUP BY GROUPING SETS ((period, placement), (period, audience), (period)) ORDER BY ALL"
    )


def _answer(cause: str, slice_: Slice) -> str:
    return json.dumps({"cause": cause, "slice": dict(slice_)})


@register
class CausalDiagnosis(Environment):
    name = "causal_diagnosis"
    capability = "causal_diagnosis"
    description = (
        "Diagnosing the root cause of a change in metrics by exploring data with queries: forming "
        "hypotheses, comparing segments and time windows, ruling out confounders, and attributing "
        "the change to the right cause and the right slice of the data."
    )
    Config = Config
    ladder = (
        {"effect_size": 0.8, "n_confounders": 0},
        {"effect_size": 0.6, "n_confounders": 1},
        {"effect_size": 0.4, "n_confounders": 2},
        {"effect_size": 0.3, "n_confounders": 3},
    )
    max_turns = 12
    sql_limits: ClassVar[SQLLimits] = SQLLimits()
    # one in-memory DuckDB for the process; results of (episode, query), which are deterministic
    databases: ClassVar[_Databases] = _Databases(sql_limits)
    sql_results: ClassVar[BoundedCache[str]] = BoundedCache(1024)
    world: _World

    @property
    def instructions(self) -> str:
        window = self.config.window_days
        return (
            "You are a marketing analyst. A campaign's metrics changed; find why. Tables: "
            "daily_campaign(day, impressions, clicks, orders, spend), segment_daily(day, placement, device, region, "
            "audience, impressions, clicks, orders, spend), budget_log(day, daily_budget), "
            "inventory(day, in_stock_share). "
            f"Days 0-{window - 1} are the baseline window, days {window}-{2 * window - 1} the intervention window. "
            f"Dimensions: {json.dumps(DIMENSIONS)}. Possible causes: {', '.join(CAUSES)}. "
            'Answer with JSON only: {"cause": <cause>, "slice": {<dimension>: <value>, ...}} using an empty slice '
            "for campaign-wide causes and NO_SIGNAL."
        )

    def _generate(self, seed: int) -> _World:
        cfg = self.config
        tables, cause, slice_, onset = _simulate(np.random.default_rng(seed), cfg)
        threshold = np.log1p(cfg.effect_size) / 2
        problem = _strength_problem(tables, cfg.window_days, cause, slice_)
        found = _diagnose(tables, cfg.window_days, threshold)
        if problem is None and (found[0] != cause or set(found[1]) != set(slice_)):
            problem = f"not distinguishable: visible data point to {found[0]} {dict(found[1])}"
        return _World(tables, cause, slice_, onset, problem)

    def _task(self) -> str:
        return "Our campaign's performance changed in the intervention window. What caused it, and in which slice?"

    def _reject(self) -> str | None:
        return self.world.problem

    @tool
    def sql(self, query: str) -> str:
        """Run one read-only DuckDB SELECT over the campaign tables; returns CSV text (max 8,000 chars)."""
        episode = (self.key, self.generator_seed)
        return self.sql_results.get((episode, query), self._run, episode, query)

    def _run(self, episode: Hashable, query: str) -> str:
        return _run_sql(self.databases.cursor(episode, self.world.tables), query, self.sql_limits.timeout_s)

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        answer = json_object(final_answer)
        valid = answer is not None and answer.get("cause") in CAUSES and isinstance(answer.get("slice", {}), dict)
        if not valid:
            return 0.0, {"parsed": False}
        predicted = {(str(k), str(v)) for k, v in answer.get("slice", {}).items()}
        truth = set(self.world.slice)
        union = predicted | truth
        jaccard = len(predicted & truth) / len(union) if union else 1.0
        cause_right = answer["cause"] == self.world.cause
        r_attr = cause_right * (0.5 + 0.5 * jaccard)
        r_full = float(cause_right and predicted == truth)
        reward = 0.65 * r_attr + 0.30 * r_full + 0.05
        return round(reward, 6), {
            "parsed": True,
            "cause_right": cause_right,
            "jaccard": jaccard,
            "r_full": r_full,
            "true_cause": self.world.cause,
            "onset": self.world.onset,
        }

    def _queries(self) -> list[str]:
        window = self.config.window_days
        return [
            call("sql", query="SELECT * FROM budget_log JOIN inventory USING (day) ORDER BY day"),
            call("sql", query=_mix_sql(window)),
            call("sql", query=_slice_sql(window)),
        ]

    def _oracle(self) -> list[str]:
        return self._queries() + [_answer(self.world.cause, self.world.slice)]

    def _wrong(self) -> list[list[str]]:
        cause, slice_ = self.world.cause, self.world.slice
        other = CAUSES[(CAUSES.index(cause) + 1) % len(CAUSES)]
        wrong = [
            [_answer(other, slice_)],
            [_answer("NO_SIGNAL" if cause != "NO_SIGNAL" else "CREATIVE_FATIGUE", ())],
            ["The cause is probably creative fatigue."],
        ]
        if slice_:
            dim, value = slice_[0]
            moved = DIMENSIONS[dim][(DIMENSIONS[dim].index(value) + 1) % 3]
            wrong.append([_answer(cause, ((dim, moved),) + slice_[1:])])
        return wrong

    def _hint(self) -> str:
        return (
            "Compare the baseline window with the late intervention window: check budget_log and inventory first, "
            "then CTR, CVR and CPC per pair of dimensions, then impression shares per placement and audience."
        )
