#!/usr/bin/env python3
"""Checks for tests/html_browser.sh: the DOM Chromium dumped after layout (every <svg>'s box, as
the measuring script recorded it) and the screenshot PNG (decoded with zlib only: no imaging
library). Exit 0 when the page drew its charts, 1 with the reason otherwise."""
import json
import re
import struct
import sys
import zlib


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def png_pixels(path):
    """(width, height, rows of RGB(A) tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(path + " is not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = ihdr
    if depth != 8 or color not in (2, 6) or interlace != 0:
        fail("unexpected PNG format (depth %d, color type %d, interlace %d)" % (depth, color, interlace))
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def main():
    png, dom = sys.argv[1], sys.argv[2]
    text = open(dom, encoding="utf-8", errors="replace").read()
    m = re.search(r'<pre id="kharness-svg-boxes">(.*?)</pre>', text, re.S)
    if not m:
        fail("the measuring script left no result in the DOM (did the page load?)")
    boxes = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")
                       .replace("&lt;", "<").replace("&gt;", ">"))
    labels = [b["label"] for b in boxes]
    for want in ("speedup over candidate index", "per-workload speedup", "roofline"):
        if not any(want in l for l in labels):
            fail("no <svg> labelled '%s' (found %s)" % (want, labels))
    for b in boxes:
        if not (b["width"] > 0 and b["height"] > 0):
            fail("<svg> '%s' laid out as %sx%s" % (b["label"], b["width"], b["height"]))
        if b["marks"] == 0:
            fail("<svg> '%s' has no marks" % b["label"])
    width, height, bpp, rows = png_pixels(png)
    if width < 200 or height < 200:
        fail("screenshot is %dx%d" % (width, height))
    background = rows[0][:3]
    colors, ink = set(), 0
    for row in rows[::2]:
        for x in range(0, width * bpp, bpp * 2):
            px = row[x:x + 3]
            colors.add(px)
            if px != background:
                ink += 1
    sampled = (height // 2 + height % 2) * ((width + 1) // 2)
    if len(colors) < 8 or ink < sampled // 100:
        fail("the screenshot looks blank: %d colours, %d of %d sampled pixels drawn" % (len(colors), ink, sampled))
    print("ok: %d charts sized and drawn (%s); screenshot %dx%d, %d colours, %.1f%% of pixels drawn"
          % (len(boxes), ", ".join("%s %.0fx%.0f" % (b["label"][:30], b["width"], b["height"]) for b in boxes),
             width, height, len(colors), 100.0 * ink / sampled))


if __name__ == "__main__":
    main()
