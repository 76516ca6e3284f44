"""Plain SGD steps of a model on FP8 linears, for tests that compare two builds of one model bit for
bit: each step's loss (the mean square of the logits, so every output counts) and every parameter's
gradient, then an update, so each step sees new weights and new FP8 scales."""
import torch

from helpers.precision import fp8_matmul


def sgd_steps(model, tokens, positions, steps: int = 3, lr: float = 0.5) -> tuple[list[float], list[list]]:
    """(losses, gradients per step) over `steps` steps of `model(tokens, positions, None)`."""
    losses, grads = [], []
    for _ in range(steps):
        with fp8_matmul.training_step():
            loss = model(tokens, positions, None).float().square().mean()
            loss.backward()
        losses.append(float(loss))
        grads.append([p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
                p.grad = None
    return losses, grads
