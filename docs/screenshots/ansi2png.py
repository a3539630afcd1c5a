#!/usr/bin/env python3
"""Renders a `tmux capture-pane -e -p` dump (text with ANSI SGR colours) to a PNG.

Usage: ansi2png.py CAPTURE.ans OUT.png [COLUMNS ROWS]

Block elements and Braille patterns are drawn as shapes rather than taken from the font, so
they tile without gaps whatever the font has; every other character comes from DejaVu Sans
Mono. Needs Pillow (`pip install pillow`) and fonts-dejavu-core.
"""

import re
import sys

from PIL import Image, ImageDraw, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
FONT_BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"
SIZE = 15

# A dark palette (the 16 ANSI colours), close to common terminal defaults.
PALETTE = [
    (0x1d, 0x20, 0x21), (0xea, 0x69, 0x62), (0xa9, 0xb6, 0x65), (0xd8, 0xa6, 0x57),
    (0x7d, 0xae, 0xa3), (0xd3, 0x86, 0x9b), (0x89, 0xb4, 0x82), (0xd4, 0xbe, 0x98),
    (0x92, 0x83, 0x74), (0xf2, 0x8b, 0x82), (0xc4, 0xd0, 0x7e), (0xf0, 0xc5, 0x6e),
    (0x8e, 0xc0, 0xe4), (0xe5, 0x9a, 0xbc), (0xa4, 0xd0, 0x9c), (0xf2, 0xe5, 0xbc),
]
DEFAULT_FG = (0xd4, 0xbe, 0x98)
DEFAULT_BG = (0x1d, 0x20, 0x21)


def xterm256(n):
    if n < 16:
        return PALETTE[n]
    if n < 232:
        n -= 16
        levels = [0, 95, 135, 175, 215, 255]
        return (levels[n // 36], levels[(n // 6) % 6], levels[n % 6])
    v = 8 + (n - 232) * 10
    return (v, v, v)


class Cell:
    __slots__ = ("ch", "fg", "bg", "bold", "dim", "rev")

    def __init__(self, ch, st):
        self.ch = ch
        self.fg, self.bg, self.bold, self.dim, self.rev = st


def parse(text, cols, rows):
    grid = [[Cell(" ", (None, None, False, False, False)) for _ in range(cols)] for _ in range(rows)]
    fg, bg, bold, dim, rev = None, None, False, False, False
    for y, line in enumerate(text.split("\n")[:rows]):
        x = 0
        for m in re.finditer(r"\x1b\[([0-9;:]*)m|([^\x1b])", line):
            if m.group(2) is not None:
                if x < cols:
                    grid[y][x] = Cell(m.group(2), (fg, bg, bold, dim, rev))
                x += 1
                continue
            codes = [int(c) if c else 0 for c in re.split("[;:]", m.group(1))] or [0]
            i = 0
            while i < len(codes):
                c = codes[i]
                if c == 0:
                    fg, bg, bold, dim, rev = None, None, False, False, False
                elif c == 1:
                    bold = True
                elif c == 2:
                    dim = True
                elif c == 22:
                    bold = dim = False
                elif c == 7:
                    rev = True
                elif c == 27:
                    rev = False
                elif 30 <= c <= 37:
                    fg = PALETTE[c - 30]
                elif 90 <= c <= 97:
                    fg = PALETTE[c - 90 + 8]
                elif 40 <= c <= 47:
                    bg = PALETTE[c - 40]
                elif 100 <= c <= 107:
                    bg = PALETTE[c - 100 + 8]
                elif c == 39:
                    fg = None
                elif c == 49:
                    bg = None
                elif c in (38, 48) and i + 1 < len(codes):
                    if codes[i + 1] == 5 and i + 2 < len(codes):
                        col = xterm256(codes[i + 2])
                        i += 2
                    elif codes[i + 1] == 2 and i + 4 < len(codes):
                        col = tuple(codes[i + 2:i + 5])
                        i += 4
                    else:
                        col = None
                    if c == 38:
                        fg = col
                    else:
                        bg = col
                    i += 1
                i += 1
    return grid


def render(grid, out):
    font = ImageFont.truetype(FONT, SIZE)
    bold_font = ImageFont.truetype(FONT_BOLD, SIZE)
    ascent, descent = font.getmetrics()
    cw = round(font.getlength("M"))
    ch = ascent + descent
    rows, cols = len(grid), len(grid[0])
    pad = 12
    img = Image.new("RGB", (cols * cw + 2 * pad, rows * ch + 2 * pad), DEFAULT_BG)
    d = ImageDraw.Draw(img)
    for y, row in enumerate(grid):
        for x, c in enumerate(row):
            fg = c.fg or DEFAULT_FG
            bg = c.bg or DEFAULT_BG
            if c.rev:
                fg, bg = bg, fg
            if c.dim:
                fg = tuple((a + b) // 2 for a, b in zip(fg, bg))
            x0, y0 = pad + x * cw, pad + y * ch
            if bg != DEFAULT_BG:
                d.rectangle([x0, y0, x0 + cw - 1, y0 + ch - 1], fill=bg)
            o = ord(c.ch)
            if c.ch == " ":
                continue
            if 0x2800 <= o <= 0x28FF:
                # Braille: dots 1-3 and 7 down the left column, 4-6 and 8 down the right.
                bits = o - 0x2800
                pos = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (0, 3), (1, 3)]
                r = max(1, cw // 6)
                for b, (px, py) in enumerate(pos):
                    if bits & (1 << b):
                        cx = x0 + cw * (1 + 2 * px) / 4
                        cy = y0 + ch * (1 + 2 * py) / 8
                        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fg)
            elif c.ch == "█":
                d.rectangle([x0, y0, x0 + cw - 1, y0 + ch - 1], fill=fg)
            elif 0x2589 <= o <= 0x258F:
                # Left blocks: U+2589 is seven eighths, U+258F one eighth.
                eighths = 0x2590 - o
                d.rectangle([x0, y0, x0 + cw * eighths // 8 - 1, y0 + ch - 1], fill=fg)
            elif c.ch == "░":
                shade = tuple((3 * a + b) // 4 for a, b in zip(bg, fg))
                d.rectangle([x0, y0 + 2, x0 + cw - 1, y0 + ch - 3], fill=shade)
            elif c.ch in "─━":
                w = 1 if c.ch == "─" else 3
                d.rectangle([x0, y0 + ch // 2 - w // 2, x0 + cw - 1, y0 + ch // 2 + w // 2], fill=fg)
            elif c.ch == "│":
                d.rectangle([x0 + cw // 2, y0, x0 + cw // 2, y0 + ch - 1], fill=fg)
            else:
                d.text((x0, y0), c.ch, font=bold_font if c.bold else font, fill=fg)
    img.save(out)


def main():
    src, out = sys.argv[1], sys.argv[2]
    text = open(src, encoding="utf-8", errors="replace").read().rstrip("\n")
    lines = text.split("\n")
    cols = int(sys.argv[3]) if len(sys.argv) > 3 else max(len(re.sub(r"\x1b\[[0-9;:]*m", "", l)) for l in lines)
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else len(lines)
    render(parse(text, cols, rows), out)


if __name__ == "__main__":
    main()
