"""Trail's remaining-length probe on the planner model's hidden states (paper 001).

MLP ``Linear(d, 512) -> ReLU -> Linear(512, k)`` over k equal bins of remaining output length,
fed a middle layer's hidden state (forward hook, :mod:`.features`): the mean over the task part
of the prompt for the first prediction, then the last generated token's state for each
refinement, combined by Trail's Bayesian update (:class:`~..core.predictors.TrailRefiner`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from llm_planner_node.core.predictors import LengthBins, TrailRefiner
from llm_planner_node.core.task_model import Goal
from llm_planner_node.predictors.features import PlannerModel

WEIGHTS = Path(__file__).resolve().parent / "weights" / "trail_probe.npz"


class ProbeMLP(torch.nn.Module):
    """Trail's probe head: ``Linear(d, 512) -> ReLU -> Linear(512, k)``."""

    def __init__(self, d: int, k: int, hidden: int = 512) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, k))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def train_probe(x: np.ndarray, y: np.ndarray, k: int, epochs: int = 30, batch: int = 32,
                lr: float = 0.01, seed: int = 0) -> ProbeMLP:
    """Trail's recipe: AdamW, cosine LR ``lr -> 0``, cross-entropy, ``epochs`` x ``batch``."""
    torch.manual_seed(seed)
    net = ProbeMLP(x.shape[1], k)
    xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long)
    steps = epochs * ((len(x) + batch - 1) // batch)
    opt = torch.optim.AdamW(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(batch):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
            sched.step()
    return net.eval()


def save(net: ProbeMLP, bins: LengthBins, layer: int, path: Path = WEIGHTS) -> None:
    w = {f"p{i}": p.detach().numpy() for i, p in enumerate(net.parameters())}
    np.savez_compressed(path, layer=layer, k=bins.k, max_len=bins.max_len, **w)


def load(path: Path = WEIGHTS) -> tuple[ProbeMLP, LengthBins, int]:
    z = np.load(path)
    bins = LengthBins(int(z["k"]), float(z["max_len"]))
    net = ProbeMLP(z["p0"].shape[1], bins.k, z["p0"].shape[0])
    with torch.no_grad():
        for i, p in enumerate(net.parameters()):
            p.copy_(torch.tensor(z[f"p{i}"]))
    return net.eval(), bins, int(z["layer"])


class TrailProbePredictor:
    """``LengthPredictor`` for the live node (Trail, Eqs. of NOTES 001): the probe on the prompt
    at submit, then per generated token Trail's Bayesian refinement ``q_t ∝ (q_{t-1} T) * p_t``
    with ``p_t`` the probe on the last token's hidden state (:meth:`observe_tokens`, fed the
    token ids the live engine reports; the planner model recomputes the hidden state because
    vLLM keeps its own inside the engine process). ``refine_with_tokens=False`` (a serving
    model other than the planner model, whose token ids the probe cannot read) keeps the prior
    step only (``update``)."""

    def __init__(self, model: PlannerModel | None = None, path: Path = WEIGHTS, *,
                 refine_with_tokens: bool = True) -> None:
        self.pm = model or PlannerModel()
        self.net, self.bins, self.layer = load(path)
        self.refiner = TrailRefiner(self.bins)
        self.refine_with_tokens = refine_with_tokens
        self._seen: dict[int, int] = {}
        self._context: dict[int, list[int]] = {}

    @torch.no_grad()
    def probs(self, states: torch.Tensor) -> np.ndarray:
        return torch.softmax(self.net(states), -1).numpy()

    def initial(self, gen_id: int, goal: Goal) -> float:
        ids, start = self.pm.task_span(goal.instruction, goal.robot_kind)
        h = self.pm.states(ids, self.layer)[start:].mean(0)
        self._seen[gen_id] = 0
        self._context[gen_id] = list(ids)
        return self.refiner.start(gen_id, self.probs(h[None])[0])

    def update(self, gen_id: int, generated: int) -> float:
        new = generated - self._seen.get(gen_id, generated)
        if new > 0:
            self._seen[gen_id] = generated
            self.refiner.step(gen_id, np.ones(self.bins.k), new)  # flat probe = prior step only
        return self.refiner.estimate(gen_id)

    def observe(self, gen_id: int, context_ids: list[int], generated: int) -> float:
        """Refine with the probe on the last token's state (context = prompt + generated ids)."""
        h = self.pm.states(context_ids, self.layer)[-1]
        new = max(1, generated - self._seen.get(gen_id, 0))
        self._seen[gen_id] = generated
        return self.refiner.step(gen_id, self.probs(h[None])[0], new)

    def observe_tokens(self, gen_id: int, new_ids: tuple[int, ...], generated: int) -> float:
        """Per-token refinement from the generated token ids (the core calls this live)."""
        if not self.refine_with_tokens or gen_id not in self._context:
            return self.update(gen_id, generated)
        ctx = self._context[gen_id]
        ctx.extend(new_ids)
        return self.observe(gen_id, ctx, generated)

    def forget(self, gen_id: int) -> None:
        self.refiner.forget(gen_id)
        self._seen.pop(gen_id, None)
        self._context.pop(gen_id, None)

