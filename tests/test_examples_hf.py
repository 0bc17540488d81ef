"""The examples written from published Hugging Face configurations: `tfspec check` prints the parameter count of
the Hugging Face model that configuration builds (on the meta device: no weights, nothing downloaded), and the
spec is the architecture the configuration describes, fact by fact."""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec.interop.families import family_of, import_config, read_config
from tfspec.interop.mapping import architecture_problems
from tfspec.front.schema import Towers

T = pytest.importorskip("transformers")

# example -> (the published configuration, its class); the numbers are the released models' config.json
PUBLISHED = {
    "qwen3_0_6b": (dict(model_type="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                        max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
                        tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645,
                        architectures=["Qwen3ForCausalLM"]), "Qwen3ForCausalLM"),
    "gemma2_2b": (dict(model_type="gemma2", vocab_size=256000, hidden_size=2304, intermediate_size=9216,
                       num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                       query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0,
                       final_logit_softcapping=30.0, rms_norm_eps=1e-6, rope_theta=10000.0,
                       hidden_activation="gelu_pytorch_tanh", max_position_embeddings=8192,
                       pad_token_id=0, eos_token_id=1, bos_token_id=2, architectures=["Gemma2ForCausalLM"]),
                  "Gemma2ForCausalLM"),
    "roberta_base": (dict(model_type="roberta", vocab_size=50265, hidden_size=768, num_hidden_layers=12,
                          num_attention_heads=12, intermediate_size=3072, max_position_embeddings=514,
                          type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          architectures=["RobertaForMaskedLM"]), "RobertaForMaskedLM"),
    "albert_base_v2": (dict(model_type="albert", vocab_size=30000, embedding_size=128, hidden_size=768,
                            num_hidden_layers=12, num_hidden_groups=1, num_attention_heads=12, intermediate_size=3072,
                            inner_group_num=1, hidden_act="gelu_new", hidden_dropout_prob=0,
                            attention_probs_dropout_prob=0, max_position_embeddings=512, type_vocab_size=2,
                            layer_norm_eps=1e-12, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                            down_scale_factor=1, gap_size=0, net_structure_type=0, num_memory_blocks=0,
                            architectures=["AlbertForMaskedLM"]), "AlbertForMaskedLM"),
    "mixtral_8x7b": (dict(model_type="mixtral", vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                          num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                          max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-5, sliding_window=None,
                          num_local_experts=8, num_experts_per_tok=2, router_aux_loss_coef=0.02,
                          output_router_logits=False, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                          hidden_act="silu", initializer_range=0.02, attention_dropout=0.0,
                          architectures=["MixtralForCausalLM"]), "MixtralForCausalLM"),
    "gpt_oss_20b": (dict(model_type="gpt_oss", attention_bias=True, attention_dropout=0.0, eos_token_id=200002,
                         experts_per_token=4, head_dim=64, hidden_act="silu", hidden_size=2880,
                         initial_context_length=4096, initializer_range=0.02, intermediate_size=2880,
                         layer_types=["sliding_attention", "full_attention"] * 12, max_position_embeddings=131072,
                         num_attention_heads=64, num_experts_per_tok=4, num_hidden_layers=24, num_key_value_heads=8,
                         num_local_experts=32, output_router_logits=False, pad_token_id=199999, rms_norm_eps=1e-05,
                         rope_parameters={"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                          "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                          "truncate": False, "rope_theta": 150000},
                         router_aux_loss_coef=0.9, sliding_window=128, swiglu_limit=7.0, tie_word_embeddings=False,
                         vocab_size=201088, architectures=["GptOssForCausalLM"]), "GptOssForCausalLM"),
    "deepseek_v3": (dict(model_type="deepseek_v3", vocab_size=129280, hidden_size=7168, intermediate_size=18432,
                         moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128,
                         num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256, ep_size=1,
                         routed_scaling_factor=2.5, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                         v_head_dim=128, qk_nope_head_dim=128, topk_method="noaux_tc", n_group=8, topk_group=4,
                         num_experts_per_tok=8, moe_layer_freq=1, first_k_dense_replace=3, norm_topk_prob=True,
                         scoring_func="sigmoid", hidden_act="silu", max_position_embeddings=163840,
                         initializer_range=0.02, rms_norm_eps=1e-6, rope_theta=10000,
                         rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                                       "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                       "type": "yarn"},
                         attention_bias=False, attention_dropout=0.0, num_nextn_predict_layers=1,
                         tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
                         architectures=["DeepseekV3ForCausalLM"]), "DeepseekV3ForCausalLM"),
    "vit_base": (dict(model_type="vit", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, initializer_range=0.02, layer_norm_eps=1e-12, image_size=224,
                      patch_size=16, num_channels=3, qkv_bias=True, num_labels=1000,  # (its id2label: 1000 classes)
                      architectures=["ViTForImageClassification"]), "ViTForImageClassification"),
    # state-spaces/mamba-130m-hf's config.json
    "mamba_130m": (dict(model_type="mamba", vocab_size=50280, hidden_size=768, num_hidden_layers=24, state_size=16,
                        expand=2, conv_kernel=4, time_step_rank=48, layer_norm_epsilon=1e-5, use_bias=False,
                        use_conv_bias=True, initializer_range=0.1, residual_in_fp32=True, rescale_prenorm_residual=False,
                        time_step_scale=1.0, time_step_min=0.001, time_step_max=0.1, time_step_init_scheme="random",
                        time_step_floor=1e-4, hidden_act="silu", tie_word_embeddings=True, pad_token_id=0,
                        bos_token_id=0, eos_token_id=0, architectures=["MambaForCausalLM"]), "MambaForCausalLM"),
    # openai/whisper-small's config.json (its suppress_tokens, which generation reads, left out)
    "whisper_small": (dict(model_type="whisper", vocab_size=51865, num_mel_bins=80, d_model=768, encoder_layers=12,
                           decoder_layers=12, encoder_attention_heads=12, decoder_attention_heads=12,
                           encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_source_positions=1500,
                           max_target_positions=448, activation_function="gelu", dropout=0.0, attention_dropout=0.0,
                           activation_dropout=0.0, init_std=0.02, scale_embedding=False, encoder_layerdrop=0.0,
                           decoder_layerdrop=0.0, use_weighted_layer_sum=False, apply_spec_augment=False,
                           begin_suppress_tokens=[220, 50257], forced_decoder_ids=[[1, 50259], [2, 50359], [3, 50363]],
                           max_length=448, pad_token_id=50257, bos_token_id=50257, eos_token_id=50257,
                           decoder_start_token_id=50258, architectures=["WhisperForConditionalGeneration"]),
                      "WhisperForConditionalGeneration"),
    # openai/clip-vit-base-patch32's config.json: its text configuration's eos_token_id 2, from before CLIP's
    # end-of-text id was written there (pooled at each text's highest id)
    "clip_vit_base_patch32": (dict(model_type="clip", projection_dim=512, logit_scale_init_value=2.6592,
                                   text_config=dict(vocab_size=49408, hidden_size=512, intermediate_size=2048,
                                                    num_hidden_layers=12, num_attention_heads=8,
                                                    max_position_embeddings=77, hidden_act="quick_gelu",
                                                    layer_norm_eps=1e-5, bos_token_id=0, eos_token_id=2,
                                                    pad_token_id=1, projection_dim=512),
                                   vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                                      num_attention_heads=12, image_size=224, patch_size=32,
                                                      hidden_act="quick_gelu", layer_norm_eps=1e-5,
                                                      projection_dim=512),
                                   architectures=["CLIPModel"]), "CLIPModel"),
    # google/siglip-base-patch16-224's config.json: its towers' configurations the defaults, which are its own
    "siglip_base_patch16_224": (dict(model_type="siglip", text_config=dict(vocab_size=32000, hidden_size=768,
                                                                         intermediate_size=3072,
                                                                         num_hidden_layers=12, num_attention_heads=12,
                                                                         max_position_embeddings=64),
                                     vision_config=dict(hidden_size=768, intermediate_size=3072,
                                                        num_hidden_layers=12, num_attention_heads=12, image_size=224,
                                                        patch_size=16),
                                     architectures=["SiglipModel"]), "SiglipModel"),
    # llava-hf/llava-1.5-7b-hf's config.json: CLIP ViT-L/14 at 336 pixels, Vicuna-7B (a Llama) and LLaVA-1.5's MLP
    "llava_1_5_7b": (dict(model_type="llava", image_token_index=32000, image_seq_length=576,
                          projector_hidden_act="gelu", vision_feature_layer=-2,
                          vision_feature_select_strategy="default", pad_token_id=32001,
                          text_config=dict(model_type="llama", vocab_size=32064, hidden_size=4096,
                                           intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                                           num_key_value_heads=32, max_position_embeddings=4096, rms_norm_eps=1e-5,
                                           rope_theta=10000.0, tie_word_embeddings=False,
                                           architectures=["LlamaForCausalLM"]),
                          vision_config=dict(model_type="clip_vision_model", hidden_size=1024,
                                             intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                                             image_size=336, patch_size=14, projection_dim=768,
                                             hidden_act="quick_gelu", layer_norm_eps=1e-5, vocab_size=32000),
                          architectures=["LlavaForConditionalGeneration"]), "LlavaForConditionalGeneration"),
    # google/gemma-3-4b-it's config.json: SigLIP-So400m at 896 pixels (4,096 patches averaged into 256 vectors),
    # Gemma 3's 4B text model with its global layers' rotary positions stretched 8 times
    "gemma3_4b": (dict(model_type="gemma3", boi_token_index=255999, eoi_token_index=256000, eos_token_id=[1, 106],
                       image_token_index=262144, initializer_range=0.02, mm_tokens_per_image=256,
                       text_config=dict(model_type="gemma3_text", hidden_size=2560, intermediate_size=10240,
                                        num_hidden_layers=34, rope_scaling={"factor": 8.0, "rope_type": "linear"},
                                        sliding_window=1024),
                       vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, image_size=896,
                                          intermediate_size=4304, num_attention_heads=16, num_hidden_layers=27,
                                          patch_size=14, vision_use_head=False),
                       architectures=["Gemma3ForConditionalGeneration"]), "Gemma3ForConditionalGeneration"),
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503's config.json: Pixtral's encoder at 1540 pixels (110 × 110 patches,
    # merged 2 × 2), Mistral Small 3.1's text model; its head untied (the file leaves the top-level
    # tie_word_embeddings to a default that transformers 5 reads as tied, unlike its text_config's)
    "mistral_small_3_1_24b": (dict(model_type="mistral3", image_token_index=10, multimodal_projector_bias=False,
                                   projector_hidden_act="gelu", spatial_merge_size=2, vision_feature_layer=-1,
                                   tie_word_embeddings=False,
                                   text_config=dict(model_type="mistral", head_dim=128, hidden_act="silu",
                                                    hidden_size=5120, intermediate_size=32768,
                                                    max_position_embeddings=131072, num_attention_heads=32,
                                                    num_hidden_layers=40, num_key_value_heads=8, rms_norm_eps=1e-5,
                                                    rope_theta=1000000000.0, sliding_window=None,
                                                    vocab_size=131072),
                                   vision_config=dict(model_type="pixtral", head_dim=64, hidden_act="silu",
                                                      hidden_size=1024, image_size=1540, intermediate_size=4096,
                                                      num_attention_heads=16, num_channels=3, num_hidden_layers=24,
                                                      patch_size=14, rope_theta=10000.0),
                                   architectures=["Mistral3ForConditionalGeneration"]),
                              "Mistral3ForConditionalGeneration"),
    # Qwen/Qwen2.5-VL-3B-Instruct's config.json (its text settings at the top level, as the file writes them; its
    # vision_config's legacy in_chans as in_channels): 448-pixel pictures here, 32 × 32 patches merged into 256
    # vectors (Hugging Face's reads any size)
    "qwen2_5_vl_3b": (dict(model_type="qwen2_5_vl", hidden_size=2048, intermediate_size=11008,
                           max_position_embeddings=128000, max_window_layers=70, num_attention_heads=16,
                           num_hidden_layers=36, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0,
                           sliding_window=32768, tie_word_embeddings=True, use_sliding_window=False,
                           vocab_size=151936, image_token_id=151655, video_token_id=151656,
                           vision_start_token_id=151652, vision_end_token_id=151653, bos_token_id=151643,
                           eos_token_id=151645, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
                           vision_config=dict(depth=32, hidden_act="silu", hidden_size=1280, intermediate_size=3420,
                                              num_heads=16, in_channels=3, out_hidden_size=2048, patch_size=14,
                                              spatial_merge_size=2, window_size=112,
                                              fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2,
                                              temporal_patch_size=2),
                           architectures=["Qwen2_5_VLForConditionalGeneration"]),
                      "Qwen2_5_VLForConditionalGeneration"),
    "bart_base": (dict(model_type="bart", vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6,
                       encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
                       decoder_ffn_dim=3072, max_position_embeddings=1024, activation_function="gelu",
                       pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                       forced_bos_token_id=0, forced_eos_token_id=2, architectures=["BartForConditionalGeneration"]),
                  "BartForConditionalGeneration"),
    "olmo2_1b": (dict(model_type="olmo2", vocab_size=100352, hidden_size=2048, intermediate_size=8192,
                      num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
                      max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=500000.0,
                      tie_word_embeddings=False, pad_token_id=100277, eos_token_id=100257,
                      architectures=["Olmo2ForCausalLM"]), "Olmo2ForCausalLM"),
    "glm4_5_air": (dict(model_type="glm4_moe", vocab_size=151552, hidden_size=4096, intermediate_size=10944,
                        moe_intermediate_size=1408, num_hidden_layers=46, num_attention_heads=96,
                        num_key_value_heads=8, head_dim=128, partial_rotary_factor=0.5, attention_bias=True,
                        attention_dropout=0.0, n_routed_experts=128, n_shared_experts=1, num_experts_per_tok=8,
                        n_group=1, topk_group=1, routed_scaling_factor=1.0, first_k_dense_replace=1,
                        norm_topk_prob=True, use_qk_norm=False, num_nextn_predict_layers=1,
                        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=1000000,
                        initializer_range=0.02, hidden_act="silu", tie_word_embeddings=False, pad_token_id=151329,
                        eos_token_id=[151329, 151336, 151338], architectures=["Glm4MoeForCausalLM"]),
                   "Glm4MoeForCausalLM"),
    # Kimi-K2-Instruct's config.json, less its quantization_config (its weights ship in FP8; tfspec reads the
    # unquantized architecture): DeepSeek-V3's under model_type 'kimi_k2'
    "kimi_k2": (dict(model_type="kimi_k2", vocab_size=163840, hidden_size=7168, intermediate_size=18432,
                     moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=64, num_key_value_heads=64,
                     n_shared_experts=1, n_routed_experts=384, routed_scaling_factor=2.827, kv_lora_rank=512,
                     q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
                     topk_method="noaux_tc", n_group=1, topk_group=1, num_experts_per_tok=8, moe_layer_freq=1,
                     first_k_dense_replace=1, norm_topk_prob=True, scoring_func="sigmoid", hidden_act="silu",
                     max_position_embeddings=131072, initializer_range=0.02, rms_norm_eps=1e-6, rope_theta=50000.0,
                     rope_scaling={"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0,
                                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
                     attention_bias=False, attention_dropout=0.0, num_nextn_predict_layers=0,
                     tie_word_embeddings=False, bos_token_id=163584, eos_token_id=163585,
                     architectures=["DeepseekV3ForCausalLM"]), "DeepseekV3ForCausalLM"),
    "modernbert_base": (dict(model_type="modernbert", vocab_size=50368, hidden_size=768, intermediate_size=1152,
                             num_hidden_layers=22, num_attention_heads=12, hidden_activation="gelu",
                             max_position_embeddings=8192, initializer_range=0.02, initializer_cutoff_factor=2.0,
                             norm_eps=1e-5, norm_bias=False, global_attn_every_n_layers=3, local_attention=128,
                             global_rope_theta=160000.0, local_rope_theta=10000.0, attention_bias=False,
                             attention_dropout=0.0, embedding_dropout=0.0, mlp_bias=False, mlp_dropout=0.0,
                             decoder_bias=True, classifier_pooling="mean", classifier_activation="gelu",
                             classifier_bias=False, pad_token_id=50283, eos_token_id=50282, bos_token_id=50281,
                             cls_token_id=50281, sep_token_id=50282, architectures=["ModernBertForMaskedLM"]),
                        "ModernBertForMaskedLM"),
    # DeepSeek-V3.2-Exp's config.json: DeepSeek-V3's, with the lightning indexer's three fields
    "deepseek_v32": (dict(model_type="deepseek_v32", vocab_size=129280, hidden_size=7168, intermediate_size=18432,
                          moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128,
                          num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256,
                          routed_scaling_factor=2.5, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                          v_head_dim=128, qk_nope_head_dim=128, n_group=8, topk_group=4, num_experts_per_tok=8,
                          first_k_dense_replace=3, norm_topk_prob=True, hidden_act="silu",
                          max_position_embeddings=163840, initializer_range=0.02, rms_norm_eps=1e-6,
                          rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                           "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                                           "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
                          index_n_heads=64, index_head_dim=128, index_topk=2048, attention_bias=False,
                          attention_dropout=0.0, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
                          num_nextn_predict_layers=1,
                          architectures=["DeepseekV32ForCausalLM"]), "DeepseekV32ForCausalLM"),
    # Llama-4-Scout-17B-16E's text_config (its multimodal checkpoint's text tower, Llama4ForCausalLM's)
    "llama4_scout": (dict(model_type="llama4_text", vocab_size=202048, hidden_size=5120, intermediate_size=8192,
                          intermediate_size_mlp=16384, num_hidden_layers=48, num_attention_heads=40,
                          num_key_value_heads=8, head_dim=128, hidden_act="silu", max_position_embeddings=10485760,
                          initializer_range=0.02, rms_norm_eps=1e-5, attention_bias=False, attention_dropout=0.0,
                          num_local_experts=16, num_experts_per_tok=1, interleave_moe_layer_step=1,
                          use_qk_norm=True, attention_chunk_size=8192, attn_temperature_tuning=True,
                          floor_scale=8192, attn_scale=0.1, output_router_logits=False, router_aux_loss_coef=0.001,
                          router_jitter_noise=0.0, tie_word_embeddings=False,
                          rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                                           "original_max_position_embeddings": 8192},
                          pad_token_id=200018, bos_token_id=200000, eos_token_id=[200001, 200007, 200008],
                          architectures=["Llama4ForCausalLM"]), "Llama4ForCausalLM"),
    "olmo3_7b": (dict(model_type="olmo3", vocab_size=100278, hidden_size=4096, intermediate_size=11008,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                      max_position_embeddings=65536, rms_norm_eps=1e-6, attention_bias=False, attention_dropout=0.0,
                      hidden_act="silu", sliding_window=4096,
                      layer_types=(["sliding_attention"] * 3 + ["full_attention"]) * 8,
                      rope_theta=500000.0, rope_scaling={"rope_type": "yarn", "factor": 8.0,
                                                         "original_max_position_embeddings": 8192,
                                                         "attention_factor": 1.2079441541679836, "beta_fast": 32.0,
                                                         "beta_slow": 1.0},
                      tie_word_embeddings=False, pad_token_id=100277, eos_token_id=100257,
                      architectures=["Olmo3ForCausalLM"]), "Olmo3ForCausalLM"),
    # Gemma-4-E2B's text model: per-layer input embeddings, the last 20 layers reading earlier layers' keys
    "gemma4_e2b": (dict(model_type="gemma4_text", vocab_size=262144, hidden_size=1536, intermediate_size=6144,
                        num_hidden_layers=35, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                        global_head_dim=512, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131072,
                        rms_norm_eps=1e-6, sliding_window=512, final_logit_softcapping=30.0, tie_word_embeddings=True,
                        attention_bias=False, attention_k_eq_v=False, hidden_size_per_layer_input=256,
                        vocab_size_per_layer_input=262144, num_kv_shared_layers=20, use_double_wide_mlp=True,
                        enable_moe_block=False, layer_types=(["sliding_attention"] * 4 + ["full_attention"]) * 7,
                        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                         "full_attention": {"rope_type": "proportional",
                                                            "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}},
                        pad_token_id=0, eos_token_id=1, bos_token_id=2, architectures=["Gemma4ForCausalLM"]),
                   "Gemma4ForCausalLM"),
    # Gemma-4-E4B's text model: as E2B's, wider, 18 layers reading earlier layers' keys, MLPs of one width
    "gemma4_e4b": (dict(model_type="gemma4_text", vocab_size=262144, hidden_size=2560, intermediate_size=10240,
                        num_hidden_layers=42, num_attention_heads=8, num_key_value_heads=2, head_dim=256,
                        global_head_dim=512, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131072,
                        rms_norm_eps=1e-6, sliding_window=512, final_logit_softcapping=30.0, tie_word_embeddings=True,
                        attention_bias=False, attention_k_eq_v=False, hidden_size_per_layer_input=256,
                        vocab_size_per_layer_input=262144, num_kv_shared_layers=18, use_double_wide_mlp=False,
                        enable_moe_block=False, layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 7,
                        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                         "full_attention": {"rope_type": "proportional",
                                                            "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}},
                        pad_token_id=0, eos_token_id=1, bos_token_id=2, architectures=["Gemma4ForCausalLM"]),
                   "Gemma4ForCausalLM"),
    # Gemma-4-26B-A4B's text model: a mixture of 128 experts (8 chosen) beside each layer's MLP
    "gemma4_26b_a4b": (dict(model_type="gemma4_text", vocab_size=262144, hidden_size=2816, intermediate_size=2112,
                            num_hidden_layers=30, num_attention_heads=16, num_key_value_heads=8,
                            num_global_key_value_heads=2, head_dim=256, global_head_dim=512,
                            hidden_activation="gelu_pytorch_tanh", max_position_embeddings=262144, rms_norm_eps=1e-6,
                            sliding_window=1024, final_logit_softcapping=30.0, tie_word_embeddings=True,
                            attention_bias=False, attention_k_eq_v=True, hidden_size_per_layer_input=0,
                            num_kv_shared_layers=0, use_double_wide_mlp=False, enable_moe_block=True, num_experts=128,
                            top_k_experts=8, moe_intermediate_size=704, use_bidirectional_attention="vision",
                            layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 5,
                            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                             "full_attention": {"rope_type": "proportional",
                                                                "partial_rotary_factor": 0.25,
                                                                "rope_theta": 1000000.0}},
                            pad_token_id=0, eos_token_id=1, bos_token_id=2, architectures=["Gemma4ForCausalLM"]),
                       "Gemma4ForCausalLM"),
    # Gemma-4-31B's text model (google/gemma-4-31B's text_config): no per-layer embeddings, shared keys or experts
    "gemma4_31b": (dict(model_type="gemma4_text", vocab_size=262144, hidden_size=5376, intermediate_size=21504,
                        num_hidden_layers=60, num_attention_heads=32, num_key_value_heads=16, head_dim=256,
                        global_head_dim=512, num_global_key_value_heads=4, attention_k_eq_v=True,
                        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=262144, rms_norm_eps=1e-6,
                        sliding_window=1024, final_logit_softcapping=30.0, tie_word_embeddings=True,
                        hidden_size_per_layer_input=0, num_kv_shared_layers=0, enable_moe_block=False,
                        use_bidirectional_attention="vision",
                        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 10,
                        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                         "full_attention": {"rope_type": "proportional",
                                                            "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}},
                        pad_token_id=0, eos_token_id=1, bos_token_id=2, architectures=["Gemma4ForCausalLM"]),
                   "Gemma4ForCausalLM"),
    # Qwen3-Next-80B-A3B (Qwen/Qwen3-Next-80B-A3B-Instruct's config.json): three Gated DeltaNet layers to one of
    # gated attention, 512 experts of which 10 and a shared one per token
    "qwen3_next_80b_a3b": (dict(model_type="qwen3_next", vocab_size=151936, hidden_size=2048, intermediate_size=5120,
                                num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                                hidden_act="silu", linear_conv_kernel_dim=4, linear_key_head_dim=128,
                                linear_num_key_heads=16, linear_num_value_heads=32, linear_value_head_dim=128,
                                full_attention_interval=4, decoder_sparse_step=1, mlp_only_layers=[],
                                moe_intermediate_size=512, shared_expert_intermediate_size=512, num_experts=512,
                                num_experts_per_tok=10, norm_topk_prob=True, output_router_logits=False,
                                router_aux_loss_coef=0.001, max_position_embeddings=262144,
                                partial_rotary_factor=0.25, rope_theta=10000000, rms_norm_eps=1e-6,
                                attention_bias=False, attention_dropout=0.0, initializer_range=0.02,
                                tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645,
                                architectures=["Qwen3NextForCausalLM"]), "Qwen3NextForCausalLM"),
    # LFM2-1.2B (LiquidAI/LFM2-1.2B's config.json): ten short-convolution layers and six of attention; its SwiGLU
    # width derived from block_ff_dim (intermediate_size) 12288 by block_auto_adjust_ff_dim
    "lfm2_1_2b": (dict(model_type="lfm2", vocab_size=65536, hidden_size=2048, intermediate_size=12288,
                       num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, conv_L_cache=3,
                       conv_bias=False, full_attn_idxs=[2, 5, 8, 10, 12, 14], block_auto_adjust_ff_dim=True,
                       block_ffn_dim_multiplier=1.0, block_multiple_of=256, norm_eps=1e-5, rope_theta=1000000.0,
                       max_position_embeddings=128000, initializer_range=0.02, tie_word_embeddings=True,
                       bos_token_id=1, eos_token_id=7, pad_token_id=0, architectures=["Lfm2ForCausalLM"]),
                  "Lfm2ForCausalLM"),
    # Granite-4.0-H-Tiny (ibm-granite/granite-4.0-h-tiny's config.json): 40 layers, attention in 5, 15, 25 and 35 and
    # Mamba-2 in the others, no positions; 64 experts of 512 (6 chosen) beside a shared SwiGLU of 1024
    "granite_4_0_h_tiny": (dict(model_type="granitemoehybrid", vocab_size=100352, hidden_size=1536,
                                intermediate_size=512, shared_intermediate_size=1024, num_hidden_layers=40,
                                num_attention_heads=12, num_key_value_heads=4, num_local_experts=64,
                                num_experts_per_tok=6, router_aux_loss_coef=0.0, output_router_logits=False,
                                mamba_n_heads=48, mamba_d_head=64, mamba_d_state=128, mamba_n_groups=1,
                                mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256, mamba_conv_bias=True,
                                mamba_proj_bias=False, position_embedding_type="nope", rope_theta=10000.0,
                                embedding_multiplier=12.0, attention_multiplier=0.0078125, residual_multiplier=0.22,
                                logits_scaling=6.0, rms_norm_eps=1e-5, attention_bias=False, attention_dropout=0.0,
                                initializer_range=0.1, hidden_act="silu", max_position_embeddings=131072,
                                tie_word_embeddings=True, bos_token_id=100257, eos_token_id=100257,
                                pad_token_id=100256,
                                layer_types=(["mamba"] * 5 + ["attention"] + ["mamba"] * 9 + ["attention"]
                                             + ["mamba"] * 9 + ["attention"] + ["mamba"] * 9 + ["attention"]
                                             + ["mamba"] * 4),
                                architectures=["GraniteMoeHybridForCausalLM"]), "GraniteMoeHybridForCausalLM"),
    # Falcon-H1-0.5B (tiiuae/Falcon-H1-0.5B-Base's config.json): Mamba-2 (24 heads of 64, mamba_d_ssm 1536, no norm)
    # beside attention (8 heads of 64, 2 key/value heads) in each of 36 layers; its µP multipliers
    "falcon_h1_0_5b": (dict(model_type="falcon_h1", vocab_size=32784, hidden_size=1024, intermediate_size=2048,
                            num_hidden_layers=36, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                            attention_bias=False, attention_dropout=0.0, attention_in_multiplier=1.0,
                            attention_out_multiplier=0.9375, attn_layer_indices=None,
                            embedding_multiplier=5.656854249492381, hidden_act="silu", initializer_range=0.02,
                            key_multiplier=0.39062499999999994, lm_head_multiplier=0.0390625, mamba_chunk_size=128,
                            mamba_conv_bias=True, mamba_d_conv=4, mamba_d_head=64, mamba_d_ssm=1536,
                            mamba_d_state=128, mamba_expand=2, mamba_n_groups=1, mamba_n_heads=24,
                            mamba_norm_before_gate=False, mamba_proj_bias=False, mamba_rms_norm=False,
                            mamba_use_mlp=True, max_position_embeddings=16384, mlp_bias=False,
                            mlp_multipliers=[0.8838834764831844, 0.5859375], projectors_bias=False, rms_norm_eps=1e-5,
                            rope_theta=100000000000.0, ssm_in_multiplier=1.25,
                            ssm_multipliers=[0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738],
                            ssm_out_multiplier=0.23570226039551587, tie_word_embeddings=False,
                            architectures=["FalconH1ForCausalLM"]), "FalconH1ForCausalLM"),
}


def hf_count(config: dict, cls: str, active: bool = False) -> int:
    """The parameters of the Hugging Face model a configuration builds, counted on the meta device; a buffer it
    holds in place of a parameter the spec has (BART's final_logits_bias, the head's bias; DeepSeek-V3's routers'
    e_score_correction_bias and Gemma 4's layer_scalar, frozen parameters of ours) counted with them; a frozen
    parameter holding what the spec computes (Whisper's encoder sinusoids, ``requires_grad`` False) left out.
    ``active``: those one position reads, a mixture's stacked experts counted for the ones it chooses."""
    with torch.device("meta"):
        model = getattr(T, cls)(read_config(config))
    total = sum(p.numel() for name, p in model.named_parameters() if p.requires_grad or not name.endswith(
        "encoder.embed_positions.weight")) + sum(
        b.numel() for name, b in model.named_buffers()
        if name == "final_logits_bias" or name.endswith((".e_score_correction_bias", ".layer_scalar")))
    if active:
        experts = config.get("num_local_experts") or config.get("n_routed_experts") or config.get("num_experts") or 1
        chosen = (config.get("num_experts_per_tok") or config.get("top_k_experts") or 1) / experts
        total -= sum(round(p.numel() * (1 - chosen)) for name, p in model.named_parameters() if ".experts." in name)
    return total


@pytest.mark.parametrize("example", PUBLISHED)
def test_examples_check_with_the_published_models_parameter_counts(example, tfspec_cli):
    config, cls = PUBLISHED[example]
    spec = tfspec.load(f"examples/{example}.tfs")
    count = hf_count(config, cls)
    from tfspec.ir.queries import active_parameters, training_only_parameters
    # (a model of towers: each tower's, and the joins' parameters beside them)
    specs = [t.spec for t in spec.towers] if isinstance(spec, Towers) else [spec]
    joins = spec.parameter_count() - sum(s.parameter_count() for s in specs)
    # Hugging Face's model leaves out multi-token prediction's modules, which tfspec counts apart
    assert spec.parameter_count() - sum(training_only_parameters(s.graph()) for s in specs) == count
    assert sum(active_parameters(s.graph()) for s in specs) + joins == hf_count(config, cls, active=True)
    expected = family_of(config["model_type"]).spec_text(read_config(config), **family_of(
        config["model_type"]).classes[cls], padding=True)
    assert architecture_problems(spec, expected, cls) == []
    assert import_config(config, name=example) == open(f"examples/{example}.tfs").read()  # the example is the import


def test_check_prints_the_count(tfspec_cli):
    result = tfspec_cli("check", "examples/qwen3_0_6b.tfs")
    assert result.returncode == 0, result.stderr
    assert f"{hf_count(*PUBLISHED['qwen3_0_6b']):,} parameters" in result.stdout
