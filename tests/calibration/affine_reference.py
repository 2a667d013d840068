"""The affine calibration maps' objectives and rules written out for the tests with scipy, apart from the package."""

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.special import log_softmax, logsumexp, softmax


def features_of(method, z):
    """What the map reads: the log-probabilities for Dirichlet calibration, else the logits."""
    return log_softmax(z, axis=1) if method == "dirichlet" else z


def affine_map(method, params, z):
    """The calibrated logits of `method`'s map `params` (kernel or scale, then bias) on logits `z`."""
    k, x = z.shape[1], features_of(method, z)
    if method == "vector":
        return x * params[:k] + params[k:]
    return x @ params[: k * k].reshape(k, k) + params[k * k :]


def nll(logits, labels):
    """Mean `-log softmax(logits)[label]`, float64."""
    log_p = log_softmax(np.asarray(logits, np.float64), axis=1)
    return float(-np.mean(log_p[np.arange(len(labels)), labels]))


def penalised_objective(method, z, labels, penalty, absent=None):
    """`params -> (value, gradient)`: mean NLL + `off * sum_{i!=j} W_ij^2 + diag * sum (W_ii - centre)^2 +
    bias * |b|^2`, the classes in `absent` dropped from the softmax (their logits -inf)."""
    off, diag, bias_weight, centre = penalty
    k, n, x = z.shape[1], len(labels), features_of(method, z)
    full, onehot = method != "vector", np.eye(k)[labels]
    keep = np.zeros(k) if absent is None else np.where(absent, -np.inf, 0.0)

    def objective(params):
        logits = affine_map(method, params, z) + keep
        residual = (softmax(logits, axis=1) - onehot) / n
        value = np.mean(logsumexp(logits, axis=1) - logits[np.arange(n), labels])
        weights, b = (params[: k * k].reshape(k, k), params[k * k :]) if full else (params[:k], params[k:])
        d = (np.diag(weights) if full else weights) - centre
        value += diag * np.sum(d**2) + bias_weight * np.sum(b**2)
        grad_b = residual.sum(axis=0) + 2 * bias_weight * b
        if not full:
            return value, np.concatenate([(x * residual).sum(axis=0) + 2 * diag * d, grad_b])
        off_diagonal = weights - np.diag(np.diag(weights))
        grad_w = x.T @ residual + 2 * off * off_diagonal + 2 * diag * np.diag(d)
        return value + off * np.sum(off_diagonal**2), np.concatenate([grad_w.ravel(), grad_b])

    return objective


def scipy_map_fit(method, z, labels, penalty, absent=None, start=None):
    """scipy's L-BFGS-B (analytic gradient) from the identity on `penalised_objective`, to a gradient of 1e-10."""
    k, full = z.shape[1], method != "vector"
    if start is None:
        start = np.concatenate([np.eye(k).ravel() if full else np.ones(k), np.zeros(k)])
    objective = penalised_objective(method, z, labels, penalty, absent)
    options = dict(maxiter=50000, maxfun=100000, ftol=1e-15, gtol=1e-10)
    with np.errstate(over="ignore", invalid="ignore"):  # the line search may try a step far out
        return minimize(objective, start, jac=True, method="L-BFGS-B", options=options).x


def scipy_temperature(z, labels):
    """Temperature scaling's maximum-likelihood `T` by scipy's bounded scalar search on `log T`."""
    result = minimize_scalar(lambda u: nll(z * np.exp(-u), labels), bounds=(-5, 5), method="bounded",
                             options=dict(xatol=1e-8))  # fmt: skip
    return float(np.exp(result.x))


def package_folds(labels, num_folds=5):
    """The package's fold rule, written out: classes dealt round-robin over the folds after a fixed shuffle."""
    n = len(labels)
    folds, shuffled = np.empty(n, int), np.random.default_rng(0).permutation(n)
    folds[shuffled[np.argsort(labels[shuffled], kind="stable")]] = np.arange(n) % num_folds
    return folds


def one_standard_error(losses):
    """The first candidate whose mean held-out loss is within one standard error of the best's."""
    losses = np.asarray(losses)
    means, best = losses.mean(axis=1), np.argmin(losses.mean(axis=1))
    return int(np.flatnonzero(means <= means[best] + losses[best].std(ddof=1) / np.sqrt(losses.shape[1]))[0])
