"""Every config rule, triggered once: its one-line message names ``section.key=value`` as given.

``RULES`` trips each rule of the config package on the tiny example config; the walk below checks that the
rules triggered are all of them (every rule call and ``raise`` in the section modules, found by reading their
source, and every field of a multi-field check), so a new rule without a case fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import megatron_crossbert.config as config_package
from megatron_crossbert.config import (CheckpointConfig, ModelConfig, TrainingConfig, load_run_config,
                                       parse_blend)

TINY = "examples/tiny_cpu.yaml"
CONFIG_DIR = Path(config_package.__file__).parent


def _saving(*overrides: str):
    return lambda: load_run_config(TINY, list(overrides)).checkpoint.check_saving()


def _positive(section: str, *names: str) -> list[tuple]:
    return [((f"{section}.{name}=0",), f"{section}.{name}=0") for name in names]


RULES: list[tuple] = [  # (overrides, or a callable that trips the rule; the text its message must hold)
    (("masking.bert_mask_prob_schedule_style=cubic",), "masking.bert_mask_prob_schedule_style='cubic'"),
    (("masking.seed=-1",), "masking.seed=-1"),
    (("masking.mask_ratio=0.2",), "masking.mask_ratio=0.2"),
    (("masking.bert_mask_prob=1.0",), "masking.bert_mask_prob=1.0"),
    (("masking.bert_replace_mask=-0.1",), "masking.bert_replace_mask=-0.1"),
    (("masking.bert_replace_random=-0.1",), "masking.bert_replace_random=-0.1"),
    (("masking.bert_replace_mask=0.9", "masking.bert_replace_random=0.2"),
     "masking.bert_replace_mask=0.9 + masking.bert_replace_random=0.2 must be <= 1"),
    (("masking.pin_cls=true",), "masking.pin_cls=true is incompatible with masking.complementary=true"),
    (("masking.bert_mask_prob_schedule='0:1.5'",), "masking.bert_mask_prob_schedule='0:1.5'"),
    *_positive("data", "seq_length"),
    (("data.strip_wrapper_tokens=sometimes",), "data.strip_wrapper_tokens='sometimes'"),
    (("data.num_workers=-1",), "data.num_workers=-1 must be >= 0"),
    (("data.split='a,b'",), "data.split='a,b'"),
    (("data.split='0,1,0'",), "data.split='0,1,0'"),
    (("data.data_path=[a, 0.5]",), "data.data_path=['a', 0.5]"),
    (("data.data_path=[0, a, 1, b]",), "data.data_path=[0.0, 'a', 1.0, 'b']"),
    (lambda: parse_blend([]), "data.data_path=[]"),
    (("model.arch=gpt",), "model.arch='gpt'"),
    (("model.arch=bert", "model.encoder=modern", "model.decoder_num_layers=0"),
     "model.encoder='modern' cannot build model.arch='bert'"),
    *_positive("model", "vocab_size", "make_vocab_size_divisible_by", "hidden_size", "num_layers",
               "num_attention_heads", "max_position_embeddings", "layernorm_epsilon", "rotary_base",
               "init_method_std", "local_rotary_base"),
    (("model.num_attention_heads=3",), "model.num_attention_heads=3 must divide model.hidden_size=64"),
    (("model.decoder_num_layers=0",), "model.decoder_num_layers=0 must be >= 1 for model.arch='crossbert'"),
    (("model.bias_gelu_fusion=true", "model.encoder=modern"), "model.bias_gelu_fusion=true needs linear biases"),
    *[((f"model.{name}=0",), f"model.{name}=0 must be > 0 or null") for name in (
        "ffn_hidden_size", "decoder_hidden_size", "decoder_num_attention_heads", "decoder_ffn_hidden_size")],
    (("model.decoder_num_attention_heads=3",), "model.decoder_num_attention_heads=3 (3 heads) must divide"),
    (("model.hidden_dropout=1.0",), "model.hidden_dropout=1.0 must be in [0, 1)"),
    (("model.attention_dropout=1.0",), "model.attention_dropout=1.0 must be in [0, 1)"),
    (("model.local_attention=3",), "model.local_attention=3"),
    (("model.global_attn_every_n_layers=0",), "model.global_attn_every_n_layers=0"),
    (("model.local_attention=16",), "model.local_attention=16 needs model.encoder='modern'"),
    (("model.attention_backend=flex",), "model.attention_backend='flex' has no attention dropout"),
    (("model.make_vocab_size_divisible_by=63", "parallel.tensor_model_parallel_size=2"),
     "model.make_vocab_size_divisible_by=63 must be divisible by parallel.tensor_model_parallel_size=2"),
    *_positive("parallel", "tensor_model_parallel_size", "pipeline_model_parallel_size",
               "distributed_timeout_minutes"),
    (("parallel.sequence_parallel=true",),
     "parallel.sequence_parallel=true needs parallel.tensor_model_parallel_size > 1, got "
     "parallel.tensor_model_parallel_size=1"),
    *_positive("training", "micro_batch_size", "global_batch_size", "train_iters", "lr", "log_interval",
               "max_nonfinite_steps", "eval_iters", "adam_eps"),
    (("training.global_batch_size=7",),
     "training.global_batch_size=7 must be a multiple of training.micro_batch_size=2"),
    (("training.min_lr=-1",), "training.min_lr=-1.0 must be >= 0"),
    (("training.min_lr=1",), "training.min_lr=1.0 must be <= training.lr=0.001"),
    (("training.lr_warmup_iters=-1",), "training.lr_warmup_iters=-1 must be >= 0"),
    (("training.lr_warmup_iters=10000",), "training.lr_warmup_iters=10000 must be <= training.train_iters=40"),
    (("training.lr_decay_style=WSD",), "training.lr_decay_style='WSD'"),
    (("training.lr_decay_style=WSD", "training.lr_wsd_decay_iters=100"),
     "training.lr_wsd_decay_iters=100, training.lr_wsd_decay_fraction=null, training.lr_warmup_iters=4, "
     "training.train_iters=40"),
    (("training.lr_wsd_decay_iters=5",), "training.lr_wsd_decay_iters=5 applies only with"),
    (("training.lr_wsd_decay_fraction=0.5",), "training.lr_wsd_decay_fraction=0.5 applies only with"),
    (("training.lr_decay_style=step",), "training.lr_decay_style='step' must be one of"),
    (lambda: TrainingConfig(lr=float("inf")), "training.lr=inf must be finite"),
    (("training.clip_grad=-1",), "training.clip_grad=-1.0 must be >= 0"),
    (("training.weight_decay=-0.1",), "training.weight_decay=-0.1 must be >= 0"),
    (("training.adam_beta1=1.0",), "training.adam_beta1=1.0 must be in [0, 1)"),
    (("training.adam_beta2=1.5",), "training.adam_beta2=1.5 must be in [0, 1)"),
    (("training.seed=-1",), "training.seed=-1 must be in [0, 2**32)"),
    (("training.peak_tflops=0",), "training.peak_tflops=0.0 must be > 0 or null"),
    (("training.eval_interval=-5",), "training.eval_interval=-5 must be >= 0"),
    (("training.probe_interval=-1",), "training.probe_interval=-1 must be >= 0"),
    (("training.probe_interval=5",), "training.probe_interval=5 needs training.probe_tasks"),
    (("checkpoint.save_interval=-1",), "checkpoint.save_interval=-1 must be >= 0"),
    (("checkpoint.keep_last=-1",), "checkpoint.keep_last=-1 must be >= 0"),
    (("checkpoint.verify=sometimes",), "checkpoint.verify='sometimes'"),
    (_saving(), "checkpoint.save_interval=20 needs checkpoint.save_dir (--save), got checkpoint.save_dir=null"),
    (_saving("checkpoint.save_interval=0", "checkpoint.async_save=true"), "checkpoint.async_save=true needs"),
    (("data.split='1,0,0'",), "training.eval_interval=20 needs validation documents, but data.split='1,0,0'"),
    (("data.seq_length=128",), "data.seq_length=128 must be <= model.max_position_embeddings=64"),
    (("data.seq_length=1",), "data.seq_length=1, masking.mask_ratio=0.5"),
    (("parallel.tensor_model_parallel_size=4",),
     "parallel.tensor_model_parallel_size=4 must divide model.num_attention_heads=2"),
    (("parallel.tensor_model_parallel_size=4", "model.num_attention_heads=4", "model.decoder_num_attention_heads=2"),
     "parallel.tensor_model_parallel_size=4 must divide the decoder's 2 attention heads "
     "(model.decoder_num_attention_heads=2)"),
    (("training.rampup_batch_size=[2, 2]",), "training.rampup_batch_size=[2, 2]"),
    (("parallel.pipeline_model_parallel_size=3",),
     "parallel.pipeline_model_parallel_size=3 must divide model.num_layers=2"),
    (("parallel.sequence_parallel=true", "parallel.tensor_model_parallel_size=2", "data.seq_length=62"),
     "parallel.sequence_parallel=true needs data.seq_length=62"),
    (("model.arch=bert", "model.decoder_cross_attention_only=true"),
     "model.decoder_cross_attention_only=true needs a reconstruction decoder, which model.arch='bert' does not have"),
    (("model.encoder=modern", "model.decoder_context_position_embedding=true"),
     "model.decoder_context_position_embedding=true needs a reconstruction decoder reading an encoder with learned "
     "positions (model.arch='crossbert' with model.encoder='modern' has rotary positions)"),
    (("training.precision=fp8", "model.hidden_size=72"), "training.precision='fp8': model.hidden_size=72"),
    (("model.encoder_token_loss_weight=-0.5",), "model.encoder_token_loss_weight=-0.5 must be >= 0.0 (0 turns it off)"),
    (("model.arch=bert", "model.encoder_token_loss_weight=1"),
     "model.encoder_token_loss_weight=1.0 needs CrossBERT's reconstruction branch, which model.arch='bert' does not "
     "have"),
    (("model.encoder_token_loss_weight=1", "model.decoder_hidden_size=32"),
     "model.encoder_token_loss_weight=1.0 shares the decoder's LM head, so the decoder width 32 must equal "
     "model.hidden_size=64"),
]


def _trip(trigger) -> ValueError:
    with pytest.raises(ValueError) as info:
        trigger() if callable(trigger) else load_run_config(TINY, list(trigger))
    return info.value


@pytest.mark.parametrize("trigger, names", RULES, ids=[text.split(" ")[0] for _, text in RULES])
def test_each_rule_names_its_key_and_the_value_given_in_one_line(trigger, names):
    message = str(_trip(trigger))
    assert names in message and "\n" not in message, message


RULE_CALLS = {"_require", "_positive", "_optional_positive", "_at_least", "_fraction", "_seed", "_check_choices",
              "named_rule", "check_window_options"}
"""What states a rule in a section module: a check of ``config.checks`` or a ``raise``."""
READING = {"parse_yaml", "load_json", "load_run_config", "from_dict", "_build_section", "parse_override",
           "_mapping_without_duplicates", "resolved"}
"""run.py's readers: a file's syntax, a section's shape and unknown keys, not a value's bound (tested in
test_config_types); and ``resolved``, whose KeyError is a caller's misuse (a field name that does not exist)."""


def _rule_sites() -> tuple[set[tuple[str, int]], set[str]]:
    """(every (file, line) that states a rule, every field a multi-field check names) in the section modules."""
    sites, fields = set(), set()
    for path in sorted(CONFIG_DIR.glob("*.py")):
        if path.name in ("checks.py", "__init__.py"):
            continue
        tree = ast.parse(path.read_text())
        skipped = {line for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name in READING
                   for line in range(node.lineno, node.end_lineno + 1)}
        for node in ast.walk(tree):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in RULE_CALLS
            if (call or isinstance(node, ast.Raise)) and node.lineno not in skipped:
                sites.add((path.name, node.lineno))
            if call and node.func.id in ("_positive", "_optional_positive"):
                fields |= {arg.value for arg in node.args if isinstance(arg, ast.Constant)}
    return sites, fields


def _site(err: ValueError) -> tuple[str, int]:
    """Where the rule that raised ``err`` is stated: the innermost section-module frame (not a lambda)."""
    site, tb = None, err.__traceback__
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename)
        if path.parent == CONFIG_DIR and path.name != "checks.py" and not tb.tb_frame.f_code.co_name.startswith("<"):
            site = (path.name, tb.tb_lineno)
        tb = tb.tb_next
    return site


def test_the_cases_trip_every_rule_of_the_config_package():
    sites, fields = _rule_sites()
    assert len(sites) > 40, sites  # the walk found the rules
    tripped = {_site(_trip(trigger)) for trigger, _ in RULES}
    assert sites <= tripped, sorted(sites - tripped)
    named = {text.split("=")[0].split(".")[-1] for _, text in RULES}
    assert fields <= named, sorted(fields - named)


def test_the_warmup_rule_reads_as_written():
    """``--set training.lr_warmup_iters=10000`` on a 6-step run names both keys and both values."""
    with pytest.raises(ValueError, match=r"^training\.lr_warmup_iters=10000 must be <= training\.train_iters=6$"):
        load_run_config(TINY, ["training.train_iters=6", "training.lr_warmup_iters=10000"])
    assert ModelConfig(hidden_size=64, num_attention_heads=2).SECTION == "model"
    assert CheckpointConfig().SECTION == "checkpoint"
