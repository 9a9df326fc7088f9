"""Which parameters matter: importances from a random forest fitted to the completed results.

As Optuna's mean-decrease-impurity evaluator: scikit-learn's ``RandomForestRegressor`` fitted to
the ok individuals' parameters (unit-scaled, unordered choices one-hot) and values; a
parameter's importance is the impurity decrease of its columns, summed. scikit-learn is imported
only here, and its absence skips this plot with a note.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from atoll.record.reader import RunData
from atoll.space import CategoricalParam, OrdinalParam, Param
from atoll.views.facts import ranked, value_name
from atoll.views.plots.common import Plot, figure, save

MIN_RESULTS = 5
"""Fewer ok results than this say nothing about importance."""
TITLE = "Parameter importances"


def importances(run: RunData) -> dict[str, float]:
    """Parameter name -> importance (they sum to 1), most important first; empty with fewer
    than :data:`MIN_RESULTS` ok results. Raises ImportError without scikit-learn."""
    from sklearn.ensemble import RandomForestRegressor

    done = ranked(run)
    params = run.space.params
    if len(done) < MIN_RESULTS or not params:
        return {}
    blocks = [_encoded(param, done[param.name].tolist()) for param in params]
    forest = RandomForestRegressor(n_estimators=64, max_depth=64, random_state=0)
    forest.fit(np.column_stack(blocks), done["loss"].astype(float))
    per_column = forest.feature_importances_
    edges = np.cumsum([0, *(block.shape[1] for block in blocks)])
    scores = [float(per_column[a:b].sum()) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    total = sum(scores)
    if total <= 0:  # every value equal: nothing to split on
        scores, total = [1.0] * len(scores), float(len(scores))
    pairs = sorted(zip(run.space.names, scores, strict=True), key=lambda p: -p[1])
    return {name: score / total for name, score in pairs}


def _encoded(param: Param, values: list[object]) -> np.ndarray:
    """One column of unit positions, or one 0/1 column per choice of an unordered choice."""
    values = [v.decode() if isinstance(v, bytes) else v for v in values]
    if isinstance(param, CategoricalParam) and not isinstance(param, OrdinalParam):
        return np.array([[float(v == c) for c in param.choices] for v in values])
    return np.array([[param.to_unit(v)] for v in values])


def parameter_importance(run: RunData, out: Path, top: int) -> Plot | str:
    try:
        scores = importances(run)
    except ImportError:
        return f"{TITLE} (they need scikit-learn, which is not installed: pip install " \
               "scikit-learn)"
    if not scores:
        return f"{TITLE} (fewer than {MIN_RESULTS} evaluations finished ok with a finite " \
               f"{value_name(run)})"
    names = list(scores)[::-1]  # the most important on top
    fig = figure(8, 1.6 + 0.45 * len(names))
    ax = fig.subplots()
    bars = ax.barh(names, [scores[n] for n in names], color="#4c72b0")
    ax.bar_label(bars, [f"{scores[n]:.2f}" for n in names], padding=3, fontsize="small")
    ax.set_xlim(0, min(1.0, max(scores.values()) * 1.15 + 0.05))
    ax.set_xlabel("importance (share of the forest's impurity decrease; they sum to 1)")
    ax.grid(True, axis="x", alpha=0.3)
    ok = len(ranked(run))
    ax.set_title(f"{TITLE}: which parameters explain the {value_name(run)} of {ok} ok "
                 "evaluations", fontsize="medium")
    return save(fig, out / "importance.png", TITLE,
                f"How much each parameter explains the {value_name(run)} of the evaluations "
                "that finished ok (pruned and failed ones are left out): scikit-learn's random "
                "forest feature importances (mean decrease in impurity), as Optuna's "
                "MeanDecreaseImpurityImportanceEvaluator.")
