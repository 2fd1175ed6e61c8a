"""Learning to rank output lengths (paper 004): a linear head over a frozen backbone, trained
with ListMLE; quality as Kendall's tau-b.

Backbone: the planner model's own last-layer hidden states, mean over the task part of the
prompt (offline; the paper fine-tunes OPT-125m, we keep the backbone frozen: 0.13k features).
Score: higher = shorter output; the core's rank key is ``-score``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from llm_planner_node.core.task_model import Goal
from llm_planner_node.predictors.features import PlannerModel

WEIGHTS = Path(__file__).resolve().parent / "weights" / "ltr_head.npz"


def listmle_loss(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """ListMLE: ``L = -sum_i [g(x_y(i)) - log sum_{k>=i} exp(g(x_y(k)))]`` with the list
    ordered shortest first (bucketed lengths; ties keep input order)."""
    order = torch.argsort(lengths, stable=True)
    s = scores[order]
    # log sum_{k >= i} exp(s_k): reverse cumulative logsumexp
    tail = torch.logcumsumexp(s.flip(0), 0).flip(0)
    return -(s - tail).sum()


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b: ``(C - D) / sqrt((n0 - n1)(n0 - n2))`` with tie corrections."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    iu = np.triu_indices(len(x), 1)
    s = float((dx * dy)[iu].sum())
    tx, ty = float((dx[iu] != 0).sum()), float((dy[iu] != 0).sum())
    return s / np.sqrt(tx * ty) if tx > 0 and ty > 0 else 0.0


def bucket(lengths: np.ndarray, width: int = 10) -> np.ndarray:
    """LTR buckets output lengths by 10 tokens before ranking."""
    return np.asarray(lengths) // width


def train_head(x: np.ndarray, lengths: np.ndarray, epochs: int = 100, batch: int = 32,
               lr: float = 0.01, seed: int = 0) -> torch.nn.Linear:
    """Linear scoring head trained with ListMLE over random lists of ``batch`` prompts (Adam)."""
    torch.manual_seed(seed)
    head = torch.nn.Linear(x.shape[1], 1)
    xt = torch.tensor(x, dtype=torch.float32)
    yt = torch.tensor(bucket(lengths), dtype=torch.float32)
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(batch):
            opt.zero_grad()
            listmle_loss(head(xt[idx]).squeeze(-1), yt[idx]).backward()
            opt.step()
    return head.eval()


def save(head: torch.nn.Linear, mean: np.ndarray, std: np.ndarray, path: Path = WEIGHTS) -> None:
    np.savez_compressed(path, w=head.weight.detach().numpy()[0], b=head.bias.detach().numpy(), mean=mean, std=std)


class LTRPredictor:
    """``LengthPredictor`` giving rank keys (``-score``, lower = shorter), computed once."""

    def __init__(self, model: PlannerModel | None = None, path: Path = WEIGHTS) -> None:
        self.pm = model or PlannerModel()
        z = np.load(path)
        self.w, self.b, self.mean, self.std = z["w"], float(z["b"][0]), z["mean"], z["std"]
        self._key: dict[int, float] = {}

    def score(self, instruction: str, robot_kind: str) -> float:
        ids, start = self.pm.task_span(instruction, robot_kind)
        n = len(self.pm.model.model.layers) - 1
        h = self.pm.states(ids, n)[start:].mean(0).numpy()
        return float(((h - self.mean) / self.std) @ self.w + self.b)

    def initial(self, gen_id: int, goal: Goal) -> float:
        self._key[gen_id] = -self.score(goal.instruction, goal.robot_kind)
        return self._key[gen_id]

    def update(self, gen_id: int, generated: int) -> float:
        return self._key[gen_id]

    def forget(self, gen_id: int) -> None:
        self._key.pop(gen_id, None)
