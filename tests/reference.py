"""Independent numpy implementations of the paper's formulas, for tests only.

Written from the paper's equations directly (float64, naive where the paper is
naive), never calling keras_ils.
"""

import numpy as np


def softmax(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def ils_targets(
    labels,
    teacher_logits,
    method,
    epsilon=0.1,
    p1=0.9,
    p2=1.0,
    temperature=1.0,
    max_epsilon=0.2,
    family="quadratic",
    num_classes=None,
):
    labels = np.asarray(labels)
    k = num_classes if teacher_logits is None else np.shape(teacher_logits)[-1]
    onehot = np.eye(k)[labels]
    if method == "none":
        return onehot
    if method == "ls":
        return onehot * (1 - epsilon) + epsilon / k
    p = softmax(teacher_logits)
    p_t = p[np.arange(len(labels)), labels]
    if family == "quadratic":
        eps_x = np.minimum(max_epsilon, p2 * (p_t - p1) ** 2)
    else:
        eps_x = np.minimum(max_epsilon, 0.1 * (np.sin(p2 * (p_t - p1)) + 1))
    if method == "ils1":
        return onehot * (1 - eps_x[:, None]) + eps_x[:, None] / k
    eps = epsilon if method == "ils2" else eps_x
    q = softmax(np.asarray(teacher_logits, np.float64) / temperature)
    q_t = q[np.arange(len(labels)), labels]
    out = np.empty_like(q)
    for i in range(len(labels)):
        e = eps if np.isscalar(eps) else eps[i]
        for j in range(k):
            out[i, j] = 1 - e if j == labels[i] else e * q[i, j] / (1 - q_t[i])
    return out


def cross_entropy(targets, logits):
    z = np.asarray(logits, np.float64)
    log_p = z - z.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    return -(targets * log_p).sum(-1)


def _bins(p, n):
    return np.clip(np.ceil(p * n) - 1, 0, n - 1).astype(int)


def ece(probs, labels, n_bins=15, weights=None):
    w = np.ones(len(labels)) if weights is None else np.asarray(weights, float)
    conf, pred = probs.max(1), probs.argmax(1)
    correct = (pred == labels).astype(float)
    b = _bins(conf, n_bins)
    total = 0.0
    for n in range(n_bins):
        m = b == n
        if w[m].sum() > 0:
            acc = np.average(correct[m], weights=w[m])
            cf = np.average(conf[m], weights=w[m])
            total += w[m].sum() / w.sum() * abs(acc - cf)
    return total


def mce(probs, labels, n_bins=15):
    conf, pred = probs.max(1), probs.argmax(1)
    correct = (pred == labels).astype(float)
    b = _bins(conf, n_bins)
    return max(abs(correct[b == n].mean() - conf[b == n].mean()) for n in range(n_bins) if (b == n).any())


def classwise_ece(probs, labels, n_bins=15):
    k = probs.shape[1]
    total = 0.0
    for j in range(k):
        pj = probs[:, j]
        yj = (labels == j).astype(float)
        b = _bins(pj, n_bins)
        for n in range(n_bins):
            m = b == n
            if m.any():
                total += m.sum() / len(labels) * abs(yj[m].mean() - pj[m].mean())
    return total / k


def class_conditional_ece(probs, labels, n_bins=15):
    classes = np.unique(labels)
    return float(np.mean([ece(probs[labels == c], labels[labels == c], n_bins) for c in classes]))


def nll(probs, labels):
    return float(-np.log(probs[np.arange(len(labels)), labels]).mean())


def brier(probs, labels):
    return float(((probs - np.eye(probs.shape[1])[labels]) ** 2).sum(1).mean())


def adaptive_ece(probs, labels, n_bins=15):
    """Equal-mass bins: rows sorted by confidence (stable), split by np.array_split, larger bins first."""
    conf, pred = probs.max(1), probs.argmax(1)
    correct = (pred == labels).astype(float)
    order = np.argsort(conf, kind="stable")
    total = 0.0
    for members in np.array_split(order, n_bins):
        if len(members):
            total += len(members) / len(labels) * abs(correct[members].mean() - conf[members].mean())
    return total
