"""tests/cli/torch_compare.py — imported by the PyTorch checks (test_export.sh,
test_export_graphs.sh) and the ONNX Runtime one (test_export_onnx.sh): another runtime's logits
against the probabilities `dtrain predict` writes."""
import numpy as np


def compare(logits, probs):
    """dtrain predict writes softmax(logits): log p_i - log p_max = l_i - l_max exactly, for every
    class whose probability did not underflow (p > 1e-30). `logits` and `probs` are N x K.
    Returns the largest difference over the largest |l_i - l_max| (relative), and how many logits
    it compared. Raises AssertionError when another class is the most likely in some row, or when
    fewer than 90 % of the probabilities are above 1e-30."""
    logits = np.asarray(logits, np.float64)
    p = np.asarray(probs, np.float64)
    assert logits.shape == p.shape, f"logits {logits.shape}, probabilities {p.shape}"
    top = p.argmax(1)
    rows = np.arange(len(p))
    keep = p > 1e-30
    a = (logits - logits[rows, top][:, None])[keep]
    b = (np.log(np.where(keep, p, 1)) - np.log(p[rows, top])[:, None])[keep]
    assert (logits.argmax(1) == top).all(), "another class is the most likely"
    assert keep.sum() >= 0.9 * keep.size, f"only {keep.sum()} of {keep.size} probabilities > 1e-30"
    return np.abs(a - b).max() / max(np.abs(a).max(), 1.0), int(keep.sum())
