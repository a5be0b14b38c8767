import pytest

from dfvg_dse.specs import DecodeConfig, SystemSpec


@pytest.fixture(scope="module")
def parts(catalog):
    """Models, devices, links and profile of the DFVG Qwen3 setting."""
    return dict(
        target=catalog.model("qwen3-8b"), draft=catalog.model("qwen3-0.6b").with_dtypes("bfloat16", "bfloat16"),
        gpu=catalog.device("rtx-4090"), fpga=catalog.device("v80"), cpu=catalog.device("xeon-silver-4310"),
        h100=catalog.device("h100-sxm"), staged=catalog.link("pcie-gen4-x16-host-staged"),
        p2p=catalog.link("pcie-gen4-x16-p2p"), h100_link=catalog.link("nvlink-4"), profile=catalog.acceptance("pair:qwen3-8b/qwen3-0.6b"),
        sync=catalog.defaults().sync_per_round_s)


@pytest.fixture(scope="module")
def make(parts):
    def build(draft="fpga", verify="gpu", link="staged", **kw):
        d, v = parts[draft], parts[verify]
        system = SystemSpec(d, v, None if d.name == v.name else parts[link])
        kw.setdefault("sync_s", parts["sync"])
        return DecodeConfig(parts["target"], system, parts["draft"], kw.pop("profile", parts["profile"]), **kw)
    return build
