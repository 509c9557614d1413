"""What a profile run builds in the child: a problem's reference, a candidate with the
reference's weights, or a BERT-base encoder (the bundled layer, or `transformers`'
BertModel with random weights: nothing is downloaded)."""

from __future__ import annotations

import torch

from kb_eval.harness import INIT_SEED, inputs_for, load_problem, reference_model
from kb_eval.inputs import build_model, precision_dtype, set_precision_flags
from kb_eval.problems import BUNDLED_DIR, load_module

ENCODER_LAYER = BUNDLED_DIR / "bert" / "level3" / "2_encoder_layer_b64s64.py"
BERT_BASE = dict(hidden=768, heads=12, intermediate=3072, eps=1e-12, vocab=30522)
INPUT_SEED = 1234  # profiling needs representative, not secret, inputs


def build_subject(payload: dict, device: torch.device) -> tuple:
    """(model, inputs, facts to record)."""
    kind = payload["kind"]
    precision = payload["precision"]
    if kind == "bert-layer":
        return _bert_layer(payload["batch"], payload["seq"], precision, device)
    if kind == "bert-hf":
        return _bert_hf(payload["batch"], payload["seq"], precision, device)
    module, init = load_problem(payload["code"], precision, device)
    model = reference_model(module, init, precision, device)
    inputs = inputs_for(module, INPUT_SEED, "profile", precision, device)
    if payload.get("solution") is not None:
        candidate = load_module(payload["solution"], "kb_candidate")
        model = build_model(candidate.ModelNew, init, INIT_SEED, device,
                            precision_dtype(precision), reference_state=model.state_dict())
    return model, inputs, {}


def _bert_layer(batch: int, seq: int, precision: str, device: torch.device) -> tuple:
    set_precision_flags(precision)
    module = load_module(ENCODER_LAYER.read_text(encoding="utf-8"), "kb_bert_layer")
    b = BERT_BASE
    model = build_model(module.Model, [b["hidden"], b["heads"], b["intermediate"], b["eps"]],
                        INIT_SEED, device, precision_dtype(precision))
    torch.manual_seed(INPUT_SEED)
    x = torch.randn(batch, seq, b["hidden"], device=device, dtype=precision_dtype(precision))
    return model, [x], {"model": "bundled BERT-base encoder layer (1 layer)"}


def _bert_hf(batch: int, seq: int, precision: str, device: torch.device) -> tuple:
    set_precision_flags(precision)
    from transformers import BertConfig, BertModel  # the 'profile' extra
    config = BertConfig()  # bert-base-uncased's shape: 12 layers, 768 hidden, 12 heads
    torch.manual_seed(INIT_SEED)
    model = BertModel(config).to(device=device, dtype=precision_dtype(precision)).eval()
    torch.manual_seed(INPUT_SEED)
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    mask = torch.ones(batch, seq, dtype=torch.long, device=device)
    attention = getattr(config, "_attn_implementation", None) or "default"

    def forward(input_ids, attention_mask):
        return model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return forward, [ids, mask], {"model": f"transformers BertModel (12 layers, random "
                                           f"weights, attention: {attention})"}
