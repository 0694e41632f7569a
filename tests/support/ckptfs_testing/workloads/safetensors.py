"""A model's weights saved twice by one process, as a trainer exporting for inference does, and
loaded back by mmap, as inference servers load them.

The model is a Llama-style decoder in Hugging Face naming (model.layers.N.self_attn.q_proj.weight
...): bf16 matrices, fp32 norms.

What the libraries do with the files:
- safetensors.torch.save_file creates a hidden .tmpXXXXXX next to model.safetensors (O_EXCL, mode
  0600, so model.safetensors ends up 0600), ftruncates it to its final size, writes the header
  (8-byte length, JSON) and the tensors in file order (a large tensor in one write), renames it
  over model.safetensors while still open, then closes it; no fsync.
- torch.save writes model.pt (a zip archive of 64-byte aligned, uncompressed records), opened
  O_TRUNC, one writev per record.
- safetensors.torch.load_file (mmap backend) maps the whole file twice, MAP_PRIVATE: read-only
  to parse the header, read-write as the tensors' storage. torch.load(mmap=True) reads the zip
  directory with read(), then maps the whole file the same way. Tensors are views of the
  mappings: their bytes are read by page faults when first touched.

Both files are byte-deterministic: the safetensors header holds a single metadata entry
(format "pt", what transformers writes), so the order of its metadata map cannot vary.
"""

import os

import torch

from ckptfs_testing import workloads as wl

LAYERS, VOCAB = 16, 32000
METADATA = {"format": "pt"}


class Safetensors(wl.Workload):
    name = "safetensors"
    description = "safetensors save_file and torch.save of a Llama-style bf16 model, loads by mmap"

    def __init__(self, nbytes):
        super().__init__(nbytes)
        # bf16 parameters: per layer 4 h^2 (attention) + 9 h^2 (MLP, intermediate 3h); embedding
        # and lm_head V h each. 2 (13 L h^2 + 2 V h) ~= nbytes.
        a, b = 26 * LAYERS, 4 * VOCAB
        h = (-b + (b * b + 4 * a * self.nbytes) ** 0.5) / (2 * a)
        self.hidden = max(64, round(h / 64) * 64)
        self._expected = None

    def shapes(self):
        """[(name, shape, dtype)] of the model's weights, in model order."""
        h, f = self.hidden, 3 * self.hidden
        out = [("model.embed_tokens.weight", (VOCAB, h), torch.bfloat16)]
        for i in range(LAYERS):
            p = f"model.layers.{i}."
            out += [(p + "input_layernorm.weight", (h,), torch.float32),
                    (p + "self_attn.q_proj.weight", (h, h), torch.bfloat16),
                    (p + "self_attn.k_proj.weight", (h, h), torch.bfloat16),
                    (p + "self_attn.v_proj.weight", (h, h), torch.bfloat16),
                    (p + "self_attn.o_proj.weight", (h, h), torch.bfloat16),
                    (p + "post_attention_layernorm.weight", (h,), torch.float32),
                    (p + "mlp.gate_proj.weight", (f, h), torch.bfloat16),
                    (p + "mlp.up_proj.weight", (f, h), torch.bfloat16),
                    (p + "mlp.down_proj.weight", (h, f), torch.bfloat16)]
        return out + [("model.norm.weight", (h,), torch.float32),
                      ("lm_head.weight", (VOCAB, h), torch.bfloat16)]

    def state(self):
        return {name: wl.tensor(f"safetensors/{name}", shape).to(dtype)
                for name, shape, dtype in self.shapes()}

    def logical_bytes(self):
        """Both files' tensors."""
        per_file = sum(int(torch.Size(s).numel()) * (4 if d == torch.float32 else 2)
                       for _, s, d in self.shapes())
        return 2 * per_file

    def save(self, root):
        return wl.run_ranks(_save, 1, (root, self))[0]

    def load(self, root, check=True):
        from safetensors.torch import load_file
        from_safetensors = load_file(os.path.join(root, "model.safetensors"))
        from_torch = torch.load(os.path.join(root, "model.pt"), mmap=True, weights_only=True,
                                map_location="cpu")
        digests = _read(from_safetensors, check), _read(from_torch, check)
        return wl.digest(*digests) if check else None

    def expected_digest(self):
        if self._expected is None:
            one = wl.digest(self.state())
            self._expected = wl.digest(one, one)
        return self._expected


def _read(tensors, check):
    """The digest of tensors mapped from a file (None without check); either way every byte is
    read from the mapping, as a copy to the GPU would."""
    if check:
        return wl.digest(tensors)
    for t in tensors.values():
        t.clone()
    return None


@wl.rank_main
def _save(rank, barrier, root, w):
    from safetensors.torch import save_file
    state = w.state()
    barrier.wait()
    os.makedirs(root, exist_ok=True)
    save_file(state, os.path.join(root, "model.safetensors"), metadata=METADATA)
    torch.save(state, os.path.join(root, "model.pt"))
