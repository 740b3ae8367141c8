"""Write a copy of a GGUF model keeping only its first N layers (for carrying a small real
model to a machine without network: the GPU machine takes 64 MiB per call).

    pip install gguf
    python3 tests/scripts/cut_layers.py models/SmolLM2-135M-Instruct.Q4_1.gguf 6 /tmp/smollm2-6l.gguf
"""

import re
import sys

import gguf


def main(src: str, n: int, dst: str) -> None:
    r = gguf.GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == f"{arch}.block_count":
            w.add_uint32(name, n)
            continue
        t = field.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            it = field.types[-1]
            if it == gguf.GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
            else:
                vals = [field.parts[i].tolist()[0] for i in field.data]
            w.add_key_value(name, vals, t, sub_type=it)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(field.parts[-1]).decode("utf-8", "surrogateescape"), t)
        else:
            w.add_key_value(name, field.parts[-1].tolist()[0], t)
    for t in r.tensors:
        m = re.match(r"blk\.(\d+)\.", t.name)
        if m and int(m.group(1)) >= n:
            continue
        shape = [int(x) for x in reversed(t.shape.tolist())]
        w.add_tensor(t.name, t.data, raw_shape=None, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
