# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: karpathy/nanoGPT, configurator.py @ 3adf61e, MIT licence (Copyright (c) 2022 Andrej
# Karpathy). A rewritten equivalent: train.py exec()s this file, which overrides train.py's
# globals from --key=value arguments (values parsed as Python literals where they are ones).
# Changed: config files as arguments are left out.
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    assert arg.startswith("--") and "=" in arg, f"expected --key=value, got {arg}"
    key, val = arg[2:].split("=", 1)
    if key not in globals():
        raise ValueError(f"Unknown config key: {key}")
    try:
        attempt = literal_eval(val)
    except (SyntaxError, ValueError):
        attempt = val
    assert type(attempt) == type(globals()[key]), f"{key}: expected {type(globals()[key]).__name__}"
    print(f"Overriding: {key} = {attempt}")
    globals()[key] = attempt
