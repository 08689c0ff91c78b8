"""`distill-export --quantize int8 --table-bits 4` (issue 83): the embedding tables at 4 bits, one
scale a row, packed two to a byte and unpacked by opset-17 arithmetic that ONNX Runtime folds at load."""

import json

import numpy as np
import pytest
import torch

from seqdistill.deploy.export import export_model, int4_table, pack_int4, quantize_int4_rows
from seqdistill.inference import ExportError, Tagger


def test_int4_rows_and_their_packing_by_hand():
    w = np.array([[0.7, -0.35, 0.0], [0.0, 0.0, 0.0], [-1.4, 0.1, 0.3]], np.float32)
    q, scale = quantize_int4_rows(w)
    np.testing.assert_allclose(scale, [0.1, 1.0, 0.2], rtol=1e-6)  # max |row| / 7; an all-zero row gets 1
    assert q.tolist() == [[7, -4, 0], [0, 0, 0], [-7, 0, 2]]  # round(w / s): -3.5 to even, 0.5 to even
    # + 8 into [1, 15]; column 2j in the low nibble, 2j + 1 in the high one; the odd width padded with 8
    assert pack_int4(q).tolist() == [[15 | 4 << 4, 8 | 8 << 4], [8 | 8 << 4, 8 | 8 << 4], [1 | 8 << 4, 10 | 8 << 4]]


@pytest.mark.parametrize("dim", [6, 7])
def test_the_graphs_unpacking_gives_the_dequantized_table(dim):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    w = np.random.default_rng(dim).normal(size=(5, dim)).astype(np.float32)
    initializers, nodes = int4_table(w, "table")
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [None])
    out = helper.make_tensor_value_info("rows", TensorProto.FLOAT, [None, dim])
    gather = helper.make_node("Gather", ["table", "ids"], ["rows"])
    model = helper.make_model(
        helper.make_graph([*nodes, gather], "g", [ids], [out], initializers),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    onnx.checker.check_model(model)
    got = ort.InferenceSession(model.SerializeToString()).run(None, {"ids": np.arange(5)})[0]
    q, scale = quantize_int4_rows(w)
    np.testing.assert_array_equal(got, q.astype(np.float32) * scale[:, None])
    assert (np.abs(got - w) <= scale[:, None] / 2 + 1e-6).all()  # within half a step of each number


def test_a_4_bit_export_tags_as_its_torch_model_with_4_bit_tables(tiny_encoder, tmp_path, glove_dir):
    from conftest import toy_cache

    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.mgkd import MGKDConfig

    cache = toy_cache(tiny_encoder, tmp_path, k=4, shard_size=16)
    run = MGKDConfig(k=3, epochs=1, max_steps=3, device="cpu", word_vectors=str(glove_dir), hash_rows=8)
    train_student(cache, tmp_path / "s", run, log=lambda *a: None)
    int8 = export_model(tmp_path / "s", tmp_path / "int8", quantize="int8")
    int4 = export_model(tmp_path / "s", tmp_path / "int4", quantize="int8", table_bits=4)
    assert json.loads((int4 / "export.json").read_text())["table_bits"] == 4
    assert "table_bits" not in json.loads((int8 / "export.json").read_text())  # 8: as before issue 83
    # every embedding table's numbers in half the bytes; the other weights as int8 had them
    import onnx
    from onnx import numpy_helper

    def initializers(d):
        return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(d / "model.onnx")).graph.initializer}

    w4, w8 = initializers(int4), initializers(int8)
    packed = {k.removesuffix("_int4_packed"): v for k, v in w4.items() if k.endswith("_int4_packed")}
    assert len(packed) >= 2 and all(2 * v.nbytes - w8[f"{k}_int8"].nbytes in (0, v.shape[0]) for k, v in packed.items())
    assert {k for k in w8 if k.endswith("_int8")} - {f"{k}_int8" for k in packed} <= set(w4)
    # the reference: the torch student with every embedding table replaced by its 4-bit rows
    torch_tagger = Tagger.load(tmp_path / "s")
    tables = [m for m in torch_tagger.backend.module.modules() if isinstance(m, torch.nn.Embedding)]
    assert len(tables) >= 2  # word pieces and the hashed word table at least
    with torch.no_grad():
        for m in tables:
            q, scale = quantize_int4_rows(m.weight.numpy())
            m.weight.copy_(torch.from_numpy(q.astype(np.float32) * scale[:, None]))
    sentences = [["peter", "visits", "Reykjavik"], ["anna", "visits", "Rome", "and", "OSLO"], ["x"]]
    onnx_int4, onnx_int8 = (Tagger.load(d) for d in (int4, int8))
    # the int4 graph computes the 4-bit torch model (its other weights int8: within int8's error of it)
    reference = torch_tagger.backend.scores(sentences)
    err4 = np.abs(onnx_int4.backend.scores(sentences) - reference).max()
    err8 = np.abs(onnx_int8.backend.scores(sentences) - reference).max()
    assert err4 < 0.05 < err8  # the int8 tables' graph is the other model: further off
    assert onnx_int4.predict(sentences) == torch_tagger.predict(sentences)


def test_4_bit_tables_need_an_int8_export(tiny_encoder, tmp_path):
    from test_export import make_student

    src = make_student(tiny_encoder, tmp_path / "s", "cnn-crf")
    with pytest.raises(ExportError, match="--table-bits 4 quantizes the tables of an int8 export: add --quantize int8"):
        export_model(src, tmp_path / "e", table_bits=4)
    with pytest.raises(ExportError, match="--table-bits 3: not one of 8, 4"):
        export_model(src, tmp_path / "e", quantize="int8", table_bits=3)
    assert not (tmp_path / "e").exists()
