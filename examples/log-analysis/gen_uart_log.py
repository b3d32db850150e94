#!/usr/bin/env python3
"""Generate examples/log-analysis/workspace/uart.log: a deterministic, realistic UART driver log.

The device is a small gateway MCU (Cortex-M4 @ 168 MHz) that talks to a host over uart1,
logs telemetry to its internal flash and drives an SPI display. The log covers about four
hours on 2026-03-02 and hides one real fault among plenty of noise:

* uart1 RX is fed by a DMA ring of only 16 descriptors x 32 bytes (512 B, see the boot lines).
  At 115200 baud that is ~44 ms of data; after the host switches the link to 921600 baud
  it is only ~5.6 ms.
* The logger erases a 128 KiB flash sector whenever a log segment is full. The vector table
  and the ISRs run from the same flash bank, so the erase stalls interrupt service for
  several milliseconds (worse when an SPI display burst adds interrupt load).
* Whenever ISR latency exceeds the ring's ~5.6 ms, the ring is exhausted, the UART overruns
  (ORE), bytes are lost and the console shows garbage / protocol CRC errors.

Red herrings: transient framing errors right after each baud-rate change (they stop once
the peer has switched too), an I2C sensor that occasionally NACKs, and one flash erase at
115200 baud that causes high latency but no overrun (the ring is large enough there).

Run: python3 gen_uart_log.py [output-path]   (default: workspace/uart.log next to this script)
The key evidence line numbers are printed on stderr. Standard library only, fixed seed:
the output is byte-for-byte reproducible.
"""

import os
import random
import sys

SEED = 20260302
DAY = "2026-03-02"
START_MS = 13 * 3600 * 1000 + 2 * 1000 + 117  # 13:00:02.117
END_MS = 17 * 3600 * 1000 + 14 * 60 * 1000  # 17:14:00.000

RING_DESC = 16
RING_DESC_BYTES = 32

rng = random.Random(SEED)
events = []  # (time_ms, seq, level, text)
_seq = 0


def emit(t_ms, level, text):
    global _seq
    _seq += 1
    events.append((int(t_ms), _seq, level, text))


def fmt_ts(t_ms):
    h = t_ms // 3_600_000
    m = (t_ms // 60_000) % 60
    s = (t_ms // 1000) % 60
    ms = t_ms % 1000
    return f"{DAY} {h:02d}:{m:02d}:{s:02d}.{ms:03d}"


def hms(h, m, s=0, ms=0):
    return ((h * 60 + m) * 60 + s) * 1000 + ms


# --------------------------------------------------------------------------------------
# Link state: which baud rate is active when. Built first because other generators
# (DMA refill rate, overrun sizes) depend on it.
# --------------------------------------------------------------------------------------
BAUD_SWITCH_1 = hms(13, 31, 7, 412)   # host asks for 921600
PEER_RESET = hms(15, 12, 18, 903)     # peer resets, link falls back to 115200
BAUD_SWITCH_2 = hms(15, 12, 41, 236)  # renegotiated to 921600


def baud_at(t_ms):
    if t_ms < BAUD_SWITCH_1:
        return 115200
    if PEER_RESET <= t_ms < BAUD_SWITCH_2:
        return 115200
    return 921600


# --------------------------------------------------------------------------------------
# Boot
# --------------------------------------------------------------------------------------
def boot():
    t = START_MS
    lines = [
        ("INFO", "sys: boot reason=POWER_ON fw=gw-edge 2.7.3 (build 8f31c0a, 2026-02-27)"),
        ("INFO", "clk: HSE 25 MHz ok, PLL M=25 N=336 P=2 -> SYSCLK 168 MHz, APB1 42 MHz, APB2 84 MHz"),
        ("INFO", "flash: 1 MiB single-bank, 5 wait states, prefetch on, ART cache on"),
        ("INFO", "nvic: vector table @0x08000000 (flash), irq handlers linked in .text (flash)"),
        ("DEBUG", "nvic: prio uart1=5 dma2_s2=5 spi2=4 tim2=6 i2c1_ev=7 flash=8"),
        ("INFO", "pwr: vdd=3.31V vbat=3.28V bor=level2"),
        ("INFO", "i2c1: init 400 kHz, sda=PB9 scl=PB8"),
        ("INFO", "i2c1: probe tmp117@0x48 ok, id=0x0117"),
        ("INFO", "spi2: init 21 MHz mode0, display st7789 240x240 on DMA1 stream 4"),
        ("INFO", "uart1: init baud=115200 8N1 oversampling=16 BRR=0x02D9 (PCLK2 84 MHz, err 0.00%)"),
        ("INFO", f"dma: uart1 rx on DMA2 stream 2 ch4, ring {RING_DESC} descriptors x {RING_DESC_BYTES} B"
                 f" ({RING_DESC * RING_DESC_BYTES} B total), refill in uart1 irq"),
        ("INFO", "dma: uart1 tx on DMA2 stream 7 ch4, single buffer 256 B"),
        ("DEBUG", "uart1: rx timeout irq enabled (idle line), hw flow control off (RTS/CTS not wired)"),
        ("INFO", "logger: flash log area sectors 8-11 (0x08080000-0x080FFFFF), segment 128 KiB"),
        ("INFO", "logger: resuming at sector 8 offset 0x1c400"),
        ("INFO", "proto: framing v3, max frame 256 B, crc16-ccitt, retransmit after 200 ms"),
        ("INFO", "console: cli ready on uart1"),
        ("INFO", "sys: scheduler started, 11 tasks, heap_free=45872"),
    ]
    for lvl, text in lines:
        emit(t, lvl, text)
        t += rng.randint(1, 37)


# --------------------------------------------------------------------------------------
# Background noise
# --------------------------------------------------------------------------------------
def heartbeats():
    t = START_MS + 9_883
    up = 10
    heap = 41_232
    min_free = 40_960
    while t < END_MS:
        heap = max(36_000, min(44_000, heap + rng.randint(-180, 180)))
        min_free = min(min_free, heap - rng.randint(0, 200))
        cpu = rng.randint(17, 29)
        emit(t, "INFO", f"sys: heartbeat up={up}s heap_free={heap} min_free={min_free} tasks=11 cpu={cpu}%")
        t += 10_000 + rng.randint(-3, 3)
        up += 10


def dma_refills():
    t = START_MS + 2_500
    while t < END_MS:
        b = baud_at(t)
        free = rng.randint(13, 16) if b == 921600 else rng.randint(15, 16)
        batch = rng.randint(6, 16) if b == 921600 else rng.randint(1, 3)
        desc = rng.randint(0, RING_DESC - 1)
        emit(t, "DEBUG", f"dma: s2 rx refill {batch} desc from #{desc}, free={free}/{RING_DESC}")
        t += rng.randint(5_000, 9_000)


def uart_stats(ore_times):
    """Cumulative uart1 counters once a minute; ore= climbs with every overrun."""
    t = START_MS + 59_771
    rx = 0
    tx = 0
    fe_total = 0
    while t < END_MS:
        rate = 11_000 if baud_at(t) == 921600 else 1_900
        rx += rate * 60 + rng.randint(-4000, 4000)
        tx += rate * 12 + rng.randint(-900, 900)
        ore = sum(1 for x in ore_times if x <= t)
        fe_total = sum(1 for x in FE_TIMES if x <= t)
        emit(t, "DEBUG", f"uart1: stats rx={rx} tx={tx} ore={ore} fe={fe_total} pe=0 ne=0 baud={baud_at(t)}")
        t += 60_000 + rng.randint(-20, 20)


def i2c_sensor():
    t = START_MS + 14_210
    temp = 31.0
    n = 0
    stuck_at = hms(14, 47, 3, 88)
    stuck_done = False
    while t < END_MS:
        temp = max(28.0, min(41.0, temp + rng.uniform(-0.15, 0.2)))
        n += 1
        if n % 37 == 0:
            emit(t, "WARN", "i2c1: NACK from 0x48, retry 1/3")
            emit(t + 2, "INFO", f"i2c1: tmp117@0x48 temp={temp:.2f}C (after retry)")
        else:
            emit(t, "INFO", f"i2c1: tmp117@0x48 temp={temp:.2f}C")
        if not stuck_done and t >= stuck_at:
            stuck_done = True
            emit(t + 511, "ERROR", "i2c1: bus timeout, SDA held low by slave 0x48 for 25 ms")
            emit(t + 512, "WARN", "i2c1: issuing 9-clock bus recovery")
            emit(t + 514, "INFO", "i2c1: bus recovered, re-init 400 kHz")
        t += 30_000 + rng.randint(-40, 40)


def seq_at(t_ms):
    """Protocol sequence number in use around t_ms (about 4 frames per second)."""
    return 1200 + (t_ms - START_MS) // 250


def proto_traffic():
    t = START_MS + 3_100
    while t < END_MS:
        seq = seq_at(t) + rng.randint(0, 3)
        ln = rng.choice([18, 32, 64, 64, 128, 200, 256])
        emit(t, "DEBUG", f"proto: rx frame seq={seq} len={ln} ok, tx ack")
        t += rng.randint(14_000, 26_000)


def flash_programs(busy):
    """Small page programs for the log: harmless, short stalls."""
    t = START_MS + 21_000
    addr = 0x0809C400
    while t < END_MS:
        if not any(a - 50 <= t <= b + 50 for a, b in busy):
            n = rng.choice([512, 1024, 2048])
            dur = n / 1024 * rng.uniform(1.4, 1.8)
            emit(t, "DEBUG", f"flash: program {n} B @0x{addr:08X} ok ({dur:.1f} ms)")
            addr += n
        t += rng.randint(38_000, 55_000)


def power():
    t = START_MS + 120_000
    while t < END_MS:
        emit(t, "INFO", f"pwr: vdd={rng.uniform(3.29, 3.32):.2f}V vbat={rng.uniform(3.25, 3.29):.2f}V")
        t += 300_000 + rng.randint(-100, 100)


def baud_queries():
    """Host polls the configured rate now and then ('baud config' noise)."""
    t = START_MS + 300_500
    while t < END_MS:
        b = baud_at(t)
        brr = "0x02D9" if b == 115200 else "0x005B"
        emit(t, "DEBUG", f"uart1: AT+IPR? from host -> {b} (BRR={brr}, oversampling=16)")
        t += rng.randint(600_000, 900_000)


# --------------------------------------------------------------------------------------
# SPI display bursts: extra interrupt load, harmless on their own
# --------------------------------------------------------------------------------------
def uart_irq_k(t_ms):
    """uart1 interrupt rate in thousands per second (DMA half/idle irqs plus errors)."""
    return rng.uniform(7.9, 9.4) if baud_at(t_ms) == 921600 else rng.uniform(0.9, 1.4)


def spi_bursts(busy):
    times = []
    t = START_MS + 47_000
    while t < END_MS:
        if not any(a - 500 <= t <= b + 500 for a, b in busy):
            times.append(t)
        t += rng.randint(95_000, 150_000)
    for i, t in enumerate(times):
        size = rng.choice([9600, 19200, 28800])
        emit(t, "DEBUG", f"spi2: display refresh burst {size} B @21 MHz (DMA1 stream 4)")
        load = rng.randint(41, 58)
        emit(t + rng.randint(20, 60), "DEBUG",
             f"isr: load {load}% (uart1 {uart_irq_k(t):.1f}k irq/s, spi2 {rng.uniform(0.9, 1.3):.1f}k irq/s)")
    return times


# --------------------------------------------------------------------------------------
# Baud-rate changes and their transient framing errors
# --------------------------------------------------------------------------------------
FE_TIMES = []


def baud_change(t, reason, garbage):
    emit(t, "INFO", f"uart1: baud change 115200 -> 921600 requested by host ({reason})")
    emit(t + 1, "INFO", "uart1: config baud=921600 8N1 oversampling=16 BRR=0x005B (PCLK2 84 MHz, err 0.16%)")
    emit(t + 2, "DEBUG", "dma: s2 rx ring re-armed, free=16/16")
    tt = t + 3
    for _ in range(rng.randint(3, 5)):
        tt += rng.randint(9, 60)
        FE_TIMES.append(tt)
        emit(tt, "WARN", f"uart1: framing error (FE) at rx byte {rng.randint(2, 180)}, byte dropped")
    if garbage:
        tt += rng.randint(3, 12)
        emit(tt, "WARN", 'console: garbage bytes in command line: "\\xf8\\x80\\xe0AT\\xfc" (4 of 6 non-printable), discarding')
    tt += rng.randint(180, 260)
    emit(tt, "INFO", "uart1: peer switched to 921600, line idle detected, link ok")
    emit(tt + 2, "DEBUG", "uart1: fe counter stable for 200 ms, leaving baud-change guard")


def peer_reset(t):
    emit(t, "WARN", "uart1: break condition detected on rx (peer reset?)")
    emit(t + 3, "INFO", "uart1: falling back to 115200 for renegotiation")
    emit(t + 4, "INFO", "uart1: config baud=115200 8N1 oversampling=16 BRR=0x02D9 (PCLK2 84 MHz, err 0.00%)")
    emit(t + 1_207, "INFO", "proto: peer hello v3, session 0x5e21 resumed")


# --------------------------------------------------------------------------------------
# Flash erase episodes: the real fault
# --------------------------------------------------------------------------------------
GARBAGE_SAMPLES = [
    "AT+CSQ", "AT+CREG?", "AT+QGPS=1", "status", "log tail 20", "AT+COPS?", "get temp", "AT+CGATT?",
]
ORE_TIMES = []


def garbage_text():
    base = rng.choice(GARBAGE_SAMPLES)
    chars = list(base)
    n_bad = rng.randint(2, 4)
    for _ in range(n_bad):
        pos = rng.randint(1, len(chars))
        chars.insert(pos, "\\x%02x" % rng.choice(list(range(0x80, 0x100)) + [0x00, 0x1f, 0x7f]))
    return "".join(chars), n_bad, len(base) + n_bad


def erase_episode(t, sector, with_spi):
    addr = {8: 0x08080000, 9: 0x080A0000, 10: 0x080C0000, 11: 0x080E0000}[sector]
    emit(t, "INFO", f"logger: segment full, rotating to sector {sector}")
    emit(t + 1, "INFO", f"flash: erase sector {sector} @0x{addr:08X} (128 KiB) start")
    dur = rng.randint(1_050, 1_900)
    b = baud_at(t)
    budget_ms = RING_DESC * RING_DESC_BYTES * 10 / b * 1000  # 10 bits per byte on the wire
    spi_t = None
    if with_spi:
        spi_t = t + rng.randint(150, 400)
        emit(spi_t, "DEBUG", "spi2: display refresh burst 28800 B @21 MHz (DMA1 stream 4)")
        emit(spi_t + 31, "DEBUG",
             f"isr: load {rng.randint(86, 93)}% (uart1 {uart_irq_k(spi_t):.1f}k irq/s, spi2 {rng.uniform(1.1, 1.3):.1f}k irq/s)")
    overruns = 0
    if b == 115200:
        # Same stall, but the ring holds ~44 ms of data at 115200: no loss.
        lat = rng.uniform(7.5, 9.5)
        emit(t + rng.randint(90, 300), "WARN",
             f"isr: uart1 rx irq latency {lat:.1f} ms during flash erase (budget {budget_ms:.1f} ms at {b} baud)")
        emit(t + rng.randint(320, 500), "DEBUG", f"dma: s2 rx ring low watermark {RING_DESC - 2}/{RING_DESC} free")
    else:
        bursts = rng.randint(2, 4) + (2 if with_spi else 0)
        slots = sorted(rng.sample(range(80, dur - 80), bursts))
        for k, off in enumerate(slots):
            bt = t + off
            lat = rng.uniform(6.4, 9.8) + (2.5 if with_spi and spi_t and bt > spi_t else 0.0)
            emit(bt, "WARN",
                 f"isr: uart1 rx irq latency {lat:.1f} ms during flash erase (budget {budget_ms:.1f} ms at {b} baud)")
            emit(bt + 1, "WARN", f"dma: rx descriptor ring exhausted (0/{RING_DESC} free)")
            lost = int((lat - budget_ms) * b / 10 / 1000) + rng.randint(0, 6)
            emit(bt + 1, "ERROR", f"uart1: RX overrun (ORE), {lost} bytes lost")
            ORE_TIMES.append(bt + 1)
            overruns += 1
            if rng.random() < 0.75 or k == 0:
                g, bad, total = garbage_text()
                emit(bt + rng.randint(3, 9), "WARN",
                     f'console: garbage bytes in command line: "{g}" ({bad} of {total} non-printable), discarding')
            if rng.random() < 0.6:
                seq = seq_at(bt) + rng.randint(0, 2)
                emit(bt + rng.randint(4, 12), "ERROR",
                     f"proto: frame crc mismatch seq={seq} len={rng.choice([64, 128, 256])}, requesting retransmit")
                if rng.random() < 0.5:
                    emit(bt + rng.randint(200, 230), "WARN", f"proto: retransmit #1 for seq={seq}")
    emit(t + dur, "INFO", f"flash: erase sector {sector} done in {dur} ms")
    if overruns:
        emit(t + dur + 6, "INFO",
             f"dma: rx ring recovered ({RING_DESC}/{RING_DESC} free), {overruns} overruns during erase")
    emit(t + dur + 9, "INFO", f"logger: sector {sector} ready, writing at offset 0x0")
    return (t, t + dur + 300)


def single_spi_near_miss(t):
    """An SPI burst alone gets close to the edge but does not exhaust the ring."""
    emit(t, "DEBUG", "spi2: display refresh burst 28800 B @21 MHz (DMA1 stream 4)")
    emit(t + 33, "DEBUG", "isr: load 79% (uart1 9.3k irq/s, spi2 1.2k irq/s)")
    emit(t + 35, "WARN", f"dma: rx ring low watermark 3/{RING_DESC} free")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "workspace", "uart.log")

    boot()
    # Baud switches (framing errors, one garbled line during the first switch).
    baud_change(BAUD_SWITCH_1, "AT+IPR=921600", garbage=True)
    peer_reset(PEER_RESET)
    baud_change(BAUD_SWITCH_2, "renegotiation after peer reset", garbage=False)

    # Flash erase schedule: one at 115200 (harmless), then every ~20-30 min at 921600.
    erase_plan = [
        (hms(13, 18, 44, 510), 9, False),
        (hms(13, 52, 20, 77), 10, False),
        (hms(14, 17, 3, 902), 11, False),
        (hms(14, 41, 37, 215), 8, True),
        (hms(15, 6, 12, 640), 9, False),
        (hms(15, 38, 50, 331), 10, False),
        (hms(16, 2, 9, 18), 11, True),
        (hms(16, 29, 45, 760), 8, False),
        (hms(16, 55, 31, 402), 9, False),
    ]
    busy = [erase_episode(t, s, spi) for t, s, spi in erase_plan]
    single_spi_near_miss(hms(14, 30, 26, 444))
    single_spi_near_miss(hms(16, 12, 55, 123))

    heartbeats()
    dma_refills()
    i2c_sensor()
    proto_traffic()
    flash_programs(busy)
    power()
    baud_queries()
    spi_bursts(busy)
    uart_stats(ORE_TIMES)

    events.sort(key=lambda e: (e[0], e[1]))
    with open(out, "w", encoding="ascii", newline="\n") as f:
        for t, _, lvl, text in events:
            f.write(f"{fmt_ts(t)} [{lvl:<5}] {text}\n")

    def first(pred):
        for i, (_, _, lvl, text) in enumerate(events, 1):
            if pred(lvl, text):
                return i
        return None

    keys = {
        "ring_config": first(lambda l, x: x.startswith("dma: uart1 rx on DMA2")),
        "vector_table_in_flash": first(lambda l, x: x.startswith("nvic: vector table")),
        "harmless_erase_at_115200": first(lambda l, x: "during flash erase" in x and "115200" in x),
        "first_baud_change": first(lambda l, x: x.startswith("uart1: baud change")),
        "first_framing_error": first(lambda l, x: "framing error" in x),
        "first_garbage": first(lambda l, x: x.startswith("console: garbage")),
        "first_erase_at_921600": first(lambda l, x: "erase sector 10" in x and "start" in x),
        "first_latency_921600": first(lambda l, x: "during flash erase" in x and "921600" in x),
        "first_descriptor_exhausted": first(lambda l, x: "descriptor ring exhausted" in x),
        "first_rx_overrun": first(lambda l, x: "RX overrun" in x),
        "first_garbage_after_overrun": None,
        "i2c_bus_timeout": first(lambda l, x: "i2c1: bus timeout" in x),
    }
    ov = keys["first_rx_overrun"]
    for i, (_, _, _, text) in enumerate(events, 1):
        if i > ov and text.startswith("console: garbage"):
            keys["first_garbage_after_overrun"] = i
            break
    counts = {}
    for _, _, lvl, _ in events:
        counts[lvl] = counts.get(lvl, 0) + 1
    print(f"wrote {out}: {len(events)} lines, levels {counts}", file=sys.stderr)
    print(f"overruns={len(ORE_TIMES)} framing_errors={len(FE_TIMES)}", file=sys.stderr)
    for k, v in keys.items():
        print(f"  {k}: L{v}", file=sys.stderr)


if __name__ == "__main__":
    main()
