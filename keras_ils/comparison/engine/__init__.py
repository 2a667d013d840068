"""Training engines: the vectorised many-MLP trainer, the students search on it, and the Keras training loop."""
