"""The paper's networks by name (Table 3 and the distillation table)."""
