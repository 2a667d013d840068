"""The main job: the whole method on one dataset (`keras-ils run` / `tune`), and the paper-table runner."""
