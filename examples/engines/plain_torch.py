"""A plain PyTorch training function for `trainer: function` (docs/guides/engines.md):
a small MLP fitted to a noisy sine, seconds on a CPU. Run by
examples/engines/function-torch.yaml:

    sweep start examples/engines/function-torch.yaml

It reads the trial's values from `config` (training.learning_rate, training.seed,
function.hidden, ...), reports eval_loss and train_loss every training.eval_every steps
with a checkpoint folder, and continues from `reporter.resume_from` when the trial does.
"""

from __future__ import annotations

import os
import tempfile

import torch


def train(config: dict, reporter) -> None:
    training, own = config["training"], config["function"]
    torch.manual_seed(training["seed"])
    inputs = torch.linspace(-3, 3, 256).unsqueeze(1)
    targets = torch.sin(inputs) + 0.1 * torch.randn_like(inputs)
    train_x, train_y, eval_x, eval_y = inputs[::2], targets[::2], inputs[1::2], targets[1::2]

    hidden = int(own.get("hidden", 16))
    model = torch.nn.Sequential(torch.nn.Linear(1, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=training["learning_rate"], weight_decay=training["weight_decay"])
    step = 0
    if reporter.resume_from:  # a promoted, retried or resumed trial: go on where its checkpoint stopped
        state = torch.load(os.path.join(reporter.resume_from, "state.pt"))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        step = state["step"]

    losses = []
    while step < training["max_steps"]:
        step += 1
        batch = torch.randint(0, len(train_x), (training["per_device_batch_size"],))
        loss = torch.nn.functional.mse_loss(model(train_x[batch]), train_y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % training["eval_every"] == 0 or step == training["max_steps"]:
            with torch.no_grad():
                eval_loss = torch.nn.functional.mse_loss(model(eval_x), eval_y).item()
            with tempfile.TemporaryDirectory() as checkpoint:
                torch.save(
                    {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(),
                     "step": step},
                    os.path.join(checkpoint, "state.pt"),
                )
                reporter.report({"eval_loss": eval_loss, "train_loss": sum(losses) / len(losses)}, step, checkpoint)
            losses = []
