# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: karpathy/nanoGPT, data/shakespeare_char/prepare.py @ 3adf61e, MIT licence (Copyright
# (c) 2022 Andrej Karpathy): writes train.bin and val.bin (uint16 token ids) and meta.pkl
# (vocab_size) next to itself for train.py's dataset 'shakespeare_char'.
# Changed for this machine (no network): the tokens are synthetic, drawn at random from a
# vocabulary of 65 characters, instead of the encoded text of tiny Shakespeare.
import os
import pickle
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
train_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
vocab_size = 65
generator = np.random.default_rng(0)
for split, size in (("train", train_tokens), ("val", max(train_tokens // 8, 200))):
    generator.integers(0, vocab_size, size, dtype=np.uint16).tofile(os.path.join(here, f"{split}.bin"))
with open(os.path.join(here, "meta.pkl"), "wb") as f:
    pickle.dump({"vocab_size": vocab_size}, f)
print(f"vocab size: {vocab_size:,}; train has {train_tokens:,} tokens")
