"""The paper's data: datasets by name for the command (`datasets`) and the synthetic task (`synthetic`)."""
