"""Variants of the tree's kernels/_bitonic.py for ``plan_sweep.py --ab`` (session 24: where kernel v23's changes to the
streaming step cost time on the tiles of several lanes a row). Writes FILE: the tree's kernel with one of v23's step
changes taken back on tiles of LANES > 1 ("net": Batcher's sort; "place": the keys by their place in the step; "both").

Run: python benchmarks/probes/lane_variants.py {net|place|both} FILE    (at commit 4e48bdf, where session 24's run 2
     used it: its edits match that tree's kernel, and a later tree's kernel fails its first assertion)
"""

import sys
from pathlib import Path

from moe_routing.kernels import _bitonic

EDITS = {
    "net": [("    keys = _sort_descending(keys)\n",
             "    if LANES == 1:\n        keys = _sort_descending(keys)\n    else:\n        keys = tl.topk(keys, CHUNK, dim=2)\n")],
    "place": [("    BY_PLACE: tl.constexpr = (KEYS == WINDOW_KEYS or KEYS == LOGIT16_KEYS) and not PADDED and kept is None\n",
               "    BY_PLACE: tl.constexpr = ((KEYS == WINDOW_KEYS or KEYS == LOGIT16_KEYS) and not PADDED and kept is None\n"
               "                              and LANES == 1)\n")],
}
ONE_PASS_STEP = """        base = (step * LANES + lane) * (CHUNK * GROUP)
        lists = lists + (_sort_descending(keys) ^ base[None, :, None].to(tl.uint32),)  # [ROWS, LANES, CHUNK], best 1st
"""
ONE_PASS_KEYS = """        keys = tl.max(_window_key(choice, place[None, None], None, offset, scale, False), axis=3)
"""
EDITS["net"].append((ONE_PASS_STEP, ONE_PASS_STEP.replace(
    "_sort_descending(keys)", "(_sort_descending(keys) if LANES == 1 else tl.topk(keys, CHUNK, dim=2))")))
EDITS["place"].append((ONE_PASS_KEYS, ONE_PASS_KEYS.replace(
    "place[None, None]", "(place[None, None] if LANES == 1 else expert[None])")))
EDITS["place"].append(("        base = (step * LANES + lane) * (CHUNK * GROUP)\n        lists",
                       "        base = (step * LANES + lane) * (CHUNK * GROUP) * (LANES == 1)\n        lists"))
EDITS["both"] = [EDITS["net"][0], EDITS["place"][0], EDITS["place"][1]]
EDITS["both"] += [(ONE_PASS_STEP, ONE_PASS_STEP.replace(
    "_sort_descending(keys) ^ base[None, :, None].to(tl.uint32)",
    "(_sort_descending(keys) ^ base[None, :, None].to(tl.uint32) if LANES == 1 else tl.topk(keys, CHUNK, dim=2))"))]


def main():
    which, out = sys.argv[1], sys.argv[2]
    source = Path(_bitonic.__file__).read_text()
    for old, new in EDITS[which]:
        assert source.count(old) == 1, (which, old)  # every edit must find its text
        source = source.replace(old, new)
    Path(out).write_text(source)


if __name__ == "__main__":
    main()
