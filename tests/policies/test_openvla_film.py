"""OpenVLA-OFT with FiLM, as OFT's ``FiLMedPrismaticVisionBackbone`` runs it and its ``finetune.py``
stores it: ``vision_backbone--<step>_checkpoint.pt`` holds the whole vision backbone, each ViT block
as ``blocks.N.block.*`` beside its ``blocks.N.scale`` / ``blocks.N.shift`` (Linear llm_dim -> vision
dim), every linear as peft's ``base_layer`` + ``lora_A`` / ``lora_B`` (LoRA ``all-linear``,
``lora_alpha = min(rank, 16)``). OFT publishes no tiny FiLM checkpoint, so the file here is written
in that layout from the upstream-written OpenVLA fixture's own vision weights."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

from policies.vla.openvla.loaded import load_openvla  # noqa: E402
from policies.vla.openvla.model import STOP_TOKEN  # noqa: E402
from policies.vla.weights import CheckpointError  # noqa: E402
from tests.policies.test_openvla_oft import DIMS, TASK, image, oft_folder  # noqa: E402

LLM_DIM = 64
RANK = 32  # OFT's default lora_rank: alpha = min(32, 16) = 16, so peft scales B @ A by 0.5
LINEAR = re.compile(r"\.(qkv|proj|fc1|fc2|q|kv)\.weight$")


def upstream_film_file(
    folder: Path, film_scale: float, lora_scale: float, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Write OFT's FiLM vision backbone file beside ``folder``'s model from its own vision weights:
    FiLM projections ~ N(0, film_scale), lora_B ~ N(0, lora_scale) (0: an adapter that adds nothing).
    Returns the weights a plain (un-FiLM'd) model would need for the same vision linears."""
    generator = torch.Generator().manual_seed(seed)
    vision = {
        k.removeprefix("vision_backbone."): v
        for k, v in load_file(str(folder / "model.safetensors")).items()
        if k.startswith("vision_backbone.")
    }
    stored: dict[str, torch.Tensor] = {}
    merged: dict[str, torch.Tensor] = {}
    widths = {}
    for key, tensor in vision.items():
        upstream = "vision_backbone." + re.sub(r"^(\w+)\.blocks\.(\d+)\.", r"\1.blocks.\2.block.", key)
        match = re.match(r"^(\w+)\.blocks\.(\d+)\.", key)
        if match:
            widths[match.group(0)] = vision[f"{match.group(1)}.pos_embed"].shape[-1]
        module, leaf = upstream.rsplit(".", 1)
        weight = key if leaf == "weight" else f"{key.rsplit('.', 1)[0]}.weight"
        if not (LINEAR.search(weight) and vision[weight].dim() == 2):  # not patch_embed's conv
            stored[upstream] = tensor
            continue
        stored[f"{module}.base_layer.{leaf}"] = tensor
        merged[f"vision_backbone.{key}"] = tensor
        if leaf == "weight":
            a = torch.randn(RANK, tensor.shape[1], generator=generator) / RANK
            b = torch.randn(tensor.shape[0], RANK, generator=generator) * lora_scale
            stored[f"{module}.lora_A.default.weight"] = a
            stored[f"{module}.lora_B.default.weight"] = b
            merged[f"vision_backbone.{key}"] = tensor + 0.5 * (b @ a)
    for prefix, width in widths.items():
        for name in ("scale", "shift"):
            stored[f"vision_backbone.{prefix}{name}.weight"] = (
                torch.randn(width, LLM_DIM, generator=generator) * film_scale
            )
            stored[f"vision_backbone.{prefix}{name}.bias"] = torch.randn(width, generator=generator) * film_scale  # fmt: skip
    # As finetune.py saves it: the state dict of a module that DDP wrapped.
    torch.save(
        {f"module.{k}": v for k, v in stored.items()}, folder / "vision_backbone--150000_checkpoint.pt"
    )
    return merged


def plain_with(folder: Path, tmp_path: Path, vision: dict[str, torch.Tensor]) -> Path:
    """A copy of the OFT folder without the FiLM file, its model's vision linears replaced."""
    plain = tmp_path / "plain"
    shutil.copytree(folder, plain)
    (plain / "vision_backbone--150000_checkpoint.pt").unlink()
    weights = load_file(str(plain / "model.safetensors"))
    weights.update(vision)
    save_file(weights, str(plain / "model.safetensors"), metadata={"format": "pt"})
    return plain


def predict(folder: Path, texts=(TASK,), images=None) -> np.ndarray:
    policy = load_openvla(folder, DIMS)
    images = image() if images is None else images
    batch = policy.inputs([images], list(texts), np.zeros((len(texts), 7)))
    return policy.predict(batch, chunk=2)["actions"]


def test_film_at_zero_with_an_adapter_that_adds_nothing_is_the_plain_oft(tmp_path):
    folder = oft_folder(tmp_path)
    upstream_film_file(folder, film_scale=0.0, lora_scale=0.0)
    film = load_openvla(folder, DIMS)
    assert film.model.vision_backbone.has_film and film.film.lora_rank == RANK
    np.testing.assert_allclose(predict(folder), predict(oft_folder(tmp_path / "b")), atol=1e-6)


def test_the_files_lora_is_merged_as_peft_merges_it(tmp_path):
    folder = oft_folder(tmp_path)
    merged = upstream_film_file(folder, film_scale=0.0, lora_scale=0.05)
    plain = plain_with(folder, tmp_path, merged)
    np.testing.assert_allclose(predict(folder), predict(plain), atol=1e-5)
    unmerged = plain_with(folder, tmp_path / "u", {})  # the adapter left out moves the actions
    assert np.abs(predict(folder) - predict(unmerged)).max() > 1e-4


def test_film_modulates_each_block_between_attention_and_mlp_by_the_prompts_average(tmp_path):
    folder = oft_folder(tmp_path)
    upstream_film_file(folder, film_scale=0.5, lora_scale=0.0)
    policy = load_openvla(folder, DIMS)
    batch = policy.inputs([image()], [TASK], np.zeros((1, 7)))
    block = policy.model.vision_backbone.fused_featurizer.blocks[0]
    seen = {}
    block.register_forward_hook(lambda module, args, out: seen.update(x=args[0], out=out))
    with torch.no_grad():
        policy.prompt(batch)
        # OFT's language embeddings: every prompt token (BOS ... 29871) and the STOP token.
        embed = policy.model.language_model.get_input_embeddings()
        ids = torch.cat([batch.tokens[0][batch.token_mask[0].bool()], torch.tensor([STOP_TOKEN])])
        language = embed(ids).mean(dim=0, keepdim=True)
        x = seen["x"]
        x = x + block.ls1(block.attn(block.norm1(x)))
        x = x * (1 + block.film.scale(language)[:, None]) + block.film.shift(language)[:, None]
        expected = x + block.ls2(block.mlp(block.norm2(x)))
    torch.testing.assert_close(seen["out"], expected, atol=1e-6, rtol=0)


def test_film_makes_the_patches_follow_the_instruction_and_padding_stays_out(tmp_path):
    folder = oft_folder(tmp_path)
    upstream_film_file(folder, film_scale=0.5, lora_scale=0.0)
    policy = load_openvla(folder, DIMS)
    texts = [TASK, "open the top drawer and put the bowl inside of it"]
    with torch.no_grad():
        a, b = (policy.prompt(policy.inputs([image()], [t], np.zeros((1, 7)))) for t in texts)
    # The image's patches (right after BOS) differ with the instruction alone.
    patches = 1 + 256  # one 224 px image: 16 x 16 patches
    assert (a.embeds[:, 1:patches] - b.embeds[:, 1:patches]).abs().max() > 1e-4
    plain = load_openvla(oft_folder(tmp_path / "plain"), DIMS)
    with torch.no_grad():
        a, b = (plain.prompt(plain.inputs([image()], [t], np.zeros((1, 7)))) for t in texts)
    assert torch.equal(a.embeds[:, 1:patches], b.embeds[:, 1:patches])  # without FiLM they cannot
    together = predict(folder, texts, torch.cat([image(), image()]))
    for row, text in enumerate(texts):  # the shorter prompt is left-padded in the batch
        np.testing.assert_allclose(predict(folder, [text])[0], together[row], atol=1e-5)


def test_a_film_file_with_a_missing_or_unknown_key_is_named(tmp_path):
    folder = oft_folder(tmp_path)
    upstream_film_file(folder, film_scale=0.1, lora_scale=0.0)
    path = folder / "vision_backbone--150000_checkpoint.pt"
    state = torch.load(path, weights_only=True)
    key = "module.vision_backbone.featurizer.blocks.1.shift.bias"
    torch.save({k: v for k, v in state.items() if k != key}, path)
    with pytest.raises(CheckpointError, match=r"missing vision_backbone\.featurizer\.blocks\.1\.shift\.bias"):
        load_openvla(folder, DIMS)
    torch.save({**state, "module.vision_backbone.featurizer.blocks.0.gate.weight": torch.zeros(1)}, path)
    with pytest.raises(CheckpointError, match=r"unexpected key vision_backbone\.featurizer\.blocks\.0\.gate"):
        load_openvla(folder, DIMS)
    path.unlink()
    (folder / "action_head--150000_checkpoint.pt").unlink()
    upstream_film_file(folder, film_scale=0.1, lora_scale=0.0)
    with pytest.raises(CheckpointError, match=r"no action_head--\*_checkpoint\.pt") as info:
        load_openvla(folder, DIMS)  # FiLM makes it an OFT folder, and OFT's head is missing
    assert "\n" not in str(info.value)


def test_a_finetuned_film_oft_exports_oft_files_and_reloads_to_the_same_actions(tmp_path):
    from policies.vla import export
    from tests.policies.test_openvla_export import finetune

    folder = oft_folder(tmp_path, proprio=False)
    upstream_film_file(folder, film_scale=0.1, lora_scale=0.05)
    policy = film_policy(folder, lora_rank=4, train_vision=True)
    film = policy.model.vision_backbone.featurizer.blocks[0].film
    before = film.scale.weight.detach().clone()
    pixels = torch.randint(
        0, 255, (2, 224, 224, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    obs = {"state": torch.zeros(2, policy.spec.state_dim), "images": {"base": pixels},
           "instruction": ["pick up the red cube", "open the top drawer"]}  # fmt: skip
    finetune(policy, obs)
    assert not torch.equal(before, film.scale.weight)  # the finetune moved FiLM itself
    policy.save(tmp_path / "policy")
    assert export.main([str(tmp_path / "policy"), str(tmp_path / "out")]) == 0
    name = "vision_backbone--0_checkpoint.pt"
    source = torch.load(folder / "vision_backbone--150000_checkpoint.pt", weights_only=True)
    written = torch.load(tmp_path / "out" / name, weights_only=True)
    # OFT's key for key (finetune.py's, less DDP's "module."), with LoRA of the source's rank.
    assert {k.removeprefix("module."): tuple(v.shape) for k, v in source.items()} == {
        k: tuple(v.shape) for k, v in written.items()
    }
    again = film_policy(tmp_path / "out")
    ours = dict(policy.model.vision_backbone.named_parameters())
    for name, tensor in again.model.vision_backbone.named_parameters():
        torch.testing.assert_close(tensor, ours[name], atol=1e-6, rtol=0, msg=name)
    assert torch.equal(again.act(obs, "greedy").samples, policy.act(obs, "greedy").samples)


def film_policy(folder: Path, **vla):
    """An OpenVLAPolicy on ``folder`` for a Franka task's state with one 224 px camera."""
    import sim_envs
    from policies import PolicyConfig, make_policy
    from policies.config import VLAConfig
    from protos import EnvSpec

    env = sim_envs.make("rlinf/FrankaReach-v0", cameras=("front",), image_height=64, image_width=64)
    spec = env.env_spec.to_dict()
    env.close()
    spec["cameras"] = [{"name": "base", "height": 224, "width": 224, "fps": 10.0}]
    spec["action"] = {**spec["action"], "low": [-10.0] * 7, "high": [10.0] * 7}
    cfg = VLAConfig(checkpoint=str(folder), dims=str(DIMS), **vla)
    return make_policy(
        EnvSpec.from_dict(spec), PolicyConfig(kind="vla", cameras=["base"], chunk_size=1, vla=cfg)
    )


def test_real_size_film_backbone_on_the_meta_device():
    """openvla-7b's DINOv2 (24 x 1024) + SigLIP (27 x 1152) with FiLM from Llama-2's 4096 per block."""
    from policies.vla.openvla.vision import TIMM_VITS, PrismaticVisionBackbone
    from policies.vla.weights import empty_parameters

    with empty_parameters():
        backbone = PrismaticVisionBackbone(
            TIMM_VITS["vit_large_patch14_reg4_dinov2.lvd142m"], TIMM_VITS["vit_so400m_patch14_siglip_224"]
        )
        backbone.add_film(4096)
    shapes = {k: tuple(v.shape) for k, v in backbone.state_dict().items()}
    assert shapes["featurizer.blocks.23.film.scale.weight"] == (1024, 4096)
    assert shapes["fused_featurizer.blocks.26.film.shift.weight"] == (1152, 4096)
    film = sum(v.numel() for k, v in backbone.state_dict().items() if ".film." in k)
    assert film == 2 * (24 * (4096 + 1) * 1024 + 27 * (4096 + 1) * 1152)
    print(f"OFT FiLM on openvla-7b's vision backbone: {film / 1e6:.1f} M parameters")
