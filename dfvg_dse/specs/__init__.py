"""Frozen, validated specifications: models, devices, links and systems (hardware), token trees,
acceptance profiles and confidence models (decoding). Values are SI; names carry units."""

from dfvg_dse.specs.decoding import (SCHEDULES, AcceptanceProfile, AcceptanceTrace, AdaptRule, ConfidenceModel,
                                     DecodeConfig, DuoRule, Eagle2Rule, TreeSpec, draft_depth_cap)
from dfvg_dse.specs.hardware import (DEVICE_KINDS, LINK_PATHS, LINK_TYPES, MEMORY_TIERS, PEAK_FALLBACKS,
                                     CalibrationDefaults, ComputePeak, DeviceSpec, FpgaFabric, InputError, LinkSpec,
                                     MemoryTier, SpecError, SystemSpec)
from dfvg_dse.specs.model import FAMILIES, NORMS, MlaSpec, ModelSpec, MoeSpec

__all__ = ["AcceptanceProfile", "AcceptanceTrace", "AdaptRule", "ConfidenceModel", "DecodeConfig", "SCHEDULES",
           "DuoRule", "Eagle2Rule", "CalibrationDefaults", "ComputePeak", "DEVICE_KINDS", "DeviceSpec", "FAMILIES", "FpgaFabric",
           "InputError", "LINK_PATHS", "LINK_TYPES", "LinkSpec", "MEMORY_TIERS", "MemoryTier", "MlaSpec", "ModelSpec", "MoeSpec", "NORMS",
           "PEAK_FALLBACKS", "SpecError", "SystemSpec", "TreeSpec", "draft_depth_cap"]
