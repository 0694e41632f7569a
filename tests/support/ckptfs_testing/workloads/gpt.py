"""GPT-style state dicts: fp16 weights, fp32 master weights and Adam state, as Megatron saves them."""
import numpy as np

from .checkpoint import ITERATION
from .data import tensor


def gpt_dims(nbytes, bytes_per_param=14):
    """(hidden, layers, vocab) of a GPT whose fp16 weights + fp32 master + Adam state take about
    nbytes (14 bytes per parameter)."""
    params = max(1, nbytes // bytes_per_param)
    hidden = 512 if params < 60_000_000 else 1024
    vocab = 8192
    layers = max(1, int(round((params - vocab * hidden) / (12 * hidden * hidden))))
    return hidden, layers, vocab


def gpt_param_shapes(hidden, layers, vocab, tp=1, tp_rank=0):
    """Megatron legacy parameter names and (tensor-parallel-sliced) shapes, in model order."""
    h = hidden
    shapes = [("language_model.embedding.word_embeddings.weight", (vocab // tp, h))]
    for i in range(layers):
        p = f"language_model.encoder.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (h,)),
            (p + "input_layernorm.bias", (h,)),
            (p + "self_attention.query_key_value.weight", (3 * h // tp, h)),
            (p + "self_attention.query_key_value.bias", (3 * h // tp,)),
            (p + "self_attention.dense.weight", (h, h // tp)),
            (p + "self_attention.dense.bias", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.bias", (h,)),
            (p + "mlp.dense_h_to_4h.weight", (4 * h // tp, h)),
            (p + "mlp.dense_h_to_4h.bias", (4 * h // tp,)),
            (p + "mlp.dense_4h_to_h.weight", (h, 4 * h // tp)),
            (p + "mlp.dense_4h_to_h.bias", (h,)),
        ]
    shapes += [("language_model.encoder.final_layernorm.weight", (h,)),
               ("language_model.encoder.final_layernorm.bias", (h,))]
    return shapes


def rng_state(seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return {"random_rng_state": (3, tuple(range(seed, seed + 16)), None),
            "np_rng_state": ("MT19937", np.arange(624, dtype=np.uint32) + seed, 624, 0, 0.0),
            "torch_rng_state": g.get_state(),
            "cuda_rng_state": g.get_state(),
            "rng_tracker_states": {"model-parallel-rng": g.get_state()}}


def megatron_args(hidden, layers, vocab, tp, pp):
    return {"num_layers": layers, "hidden_size": hidden, "num_attention_heads": hidden // 64,
            "padded_vocab_size": vocab, "tensor_model_parallel_size": tp,
            "pipeline_model_parallel_size": pp, "fp16": True, "lr": 3e-4, "seq_length": 2048,
            "iteration": ITERATION, "save": "/checkpoints/gpt", "use_distributed_optimizer": False}


def gpt_state_dict(tag, hidden, layers, vocab, tp=1, tp_rank=0, pp=1, with_optimizer=True):
    """A Megatron legacy model_optim_rng.pt state dict (fp16 model, fp32 optimizer state)."""
    shapes = gpt_param_shapes(hidden, layers, vocab, tp, tp_rank)
    model = {"language_model": {"embedding": {"word_embeddings": {}}, "encoder": {}}}
    for name, shape in shapes:
        t = tensor(f"{tag}/model/{name}", shape, "float16")
        short = name[len("language_model."):]
        if short.startswith("embedding."):
            model["language_model"]["embedding"]["word_embeddings"]["weight"] = t
        else:
            model["language_model"]["encoder"][short[len("encoder."):]] = t
    sd = {"args": megatron_args(hidden, layers, vocab, tp, pp), "checkpoint_version": 3.0,
          "iteration": ITERATION, "model": model, "rng_state": [rng_state(tp_rank + 7)]}
    if with_optimizer:
        state = {}
        masters = []
        for i, (name, shape) in enumerate(shapes):
            state[i] = {"exp_avg": tensor(f"{tag}/exp_avg/{name}", shape),
                        "exp_avg_sq": tensor(f"{tag}/exp_avg_sq/{name}", shape).abs_(),
                        "step": ITERATION}
            masters.append(tensor(f"{tag}/master/{name}", shape))
        sd["optimizer"] = {
            "optimizer": {"state": state,
                          "param_groups": [{"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8,
                                            "weight_decay": 0.1, "params": list(range(len(shapes)))}]},
            "fp32_from_fp16_params": [masters],
            "grad_scaler": {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                            "growth_interval": 1000, "_growth_tracker": 17},
        }
        sd["opt_param_scheduler"] = {"max_lr": 3e-4, "num_steps": ITERATION * 512}
    return sd
