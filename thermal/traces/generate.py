#!/usr/bin/env python3
"""Regenerates the shipped bench traces (deterministic: fixed seeds). See thermal/README.md."""
import datetime
import math
import random


# The simple trace format's columns (thermal/README.md); the Azure-style trace keeps Azure's own.
SIMPLE_HEADER = "t_s,prompt_tokens,output_tokens,session"


def write(name, header, rows):
    with open(name, "w") as f:
        f.write(header + "\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")


def before(rows, duration):
    """The requests that arrive within `duration`, in time order."""
    return sorted(r for r in rows if r[0] < duration)


def chat_sessions(rng, rows, start, duration, turns, grow, tokens_per_s, reading_s, next_session_s, label):
    """Chat sessions alongside other work, appended to `rows`: from `start` until `duration`, each
    opens with 200-1500 tokens and has `turns` (a range) turns of 100-600-token answers, the
    context growing by the answer and `grow` tokens, the next turn after the answer (at
    `tokens_per_s`) and `reading_s` of reading; the next session `next_session_s()` later."""
    session = 0
    while start < duration:
        session += 1
        t, context = start, rng.randint(200, 1500)
        for _ in range(rng.randint(*turns)):
            out = rng.randint(100, 600)
            rows.append((round(t, 1), context, out, f"{label}{session}"))
            context += out + rng.randint(*grow)
            t += out / tokens_per_s + rng.uniform(*reading_s)
        start += next_session_s()


def worker_pool(rng, rows, start, jobs, workers, draw_job, job_s, pause_s, label):
    """`jobs` requests from `workers` client workers that each send the next `pause_s` (a range)
    after their previous answer, appended to `rows`: `draw_job()` gives (prompt, output) tokens
    and `job_s(prompt, output)` the seconds a worker waits for its answer. The workers start
    within half a second of `start`. Returns when the last answer is in."""
    free = [start + rng.uniform(0.0, 0.5) for _ in range(workers)]
    for _ in range(jobs):
        w = min(range(workers), key=lambda i: free[i])
        prompt, out = draw_job()
        rows.append((round(free[w], 1), prompt, out, label))
        free[w] += job_s(prompt, out) + rng.uniform(*pause_s)
    return max(free)


def chat(seed=1, duration=1800.0):
    """One person chatting: bursts of turns with reading pauses; short prompts, medium answers."""
    rng = random.Random(seed)
    t, rows, session = 5.0, [], 0
    while t < duration:
        session += 1
        context = rng.randint(150, 600)
        for _ in range(rng.randint(2, 8)):
            out = int(min(900, rng.lognormvariate(5.6, 0.5)))
            rows.append((round(t, 1), context, out, f"c{session}"))
            context += out + rng.randint(20, 200)
            # Reading the answer (~55 tok/s stream) and typing the next question.
            t += out / 40.0 + rng.uniform(10.0, 60.0)
        t += rng.uniform(60.0, 240.0)
    return [r for r in rows if r[0] < duration]


def agent(seed=2, duration=1800.0):
    """Agent loops: turns with growing context, short tool-call outputs and tool gaps."""
    rng = random.Random(seed)
    t, rows, session = 10.0, [], 0
    while t < duration:
        session += 1
        context = rng.randint(2000, 5000)
        for _ in range(rng.randint(8, 16)):
            out = rng.randint(80, 450)
            rows.append((round(t, 1), min(context, 24000), out, f"a{session}"))
            # Time the turn takes on a ~1500 tok/s prefill, ~50 tok/s decode box, then the tool runs.
            t += min(context, 24000) / 1500.0 + out / 50.0 + rng.uniform(2.0, 15.0)
            context += out + rng.randint(300, 2500)
        t += rng.uniform(45.0, 180.0)
    return [r for r in rows if r[0] < duration]


def batch(seed=3, duration=1800.0):
    """Offline batch jobs: bursts of many requests queued at once, idle in between."""
    rng = random.Random(seed)
    rows = []
    for start in (60.0, 900.0):
        for i in range(rng.randint(40, 60)):
            rows.append((round(start + rng.uniform(0.0, 20.0), 1), rng.randint(800, 3000), rng.randint(300, 900), f"b{int(start)}"))
    return before(rows, duration)


def azure_style(seed=4, duration=3600.0):
    """Held-out trace in the public Azure LLM inference trace columns (synthetic, see README)."""
    rng = random.Random(seed)
    t0 = datetime.datetime(2023, 11, 16, 18, 0, 0)
    t, rows = 0.0, []
    while t < duration:
        # Diurnal-like modulation of the arrival rate: busy then quiet stretches.
        rate = 1.0 / 14.0 if int(t // 600) % 2 == 0 else 1.0 / 60.0
        t += rng.expovariate(rate)
        ts = t0 + datetime.timedelta(seconds=t)
        ctx = int(min(12000, rng.lognormvariate(7.4, 0.9)))
        gen = int(min(1200, rng.lognormvariate(5.3, 0.8))) + 1
        rows.append((ts.strftime("%Y-%m-%d %H:%M:%S.%f") + "0", ctx, gen))
    return rows


def code_assist(seed=5, duration=2700.0):
    """Second held-out trace: a developer with an IDE assistant. Typing bursts send short
    completions every 0.5-4 s, now and then an edit/chat request with a large context; pauses
    between bursts and one longer break."""
    rng = random.Random(seed)
    t, rows, burst = 5.0, [], 0
    while t < duration:
        burst += 1
        end = t + rng.uniform(20.0, 120.0)
        context = rng.randint(1000, 4000)
        while t < end:
            rows.append((round(t, 1), context, rng.randint(16, 96), f"k{burst}"))
            context = min(8000, context + rng.randint(0, 200))
            t += rng.uniform(0.5, 4.0)
        if rng.random() < 0.35:
            rows.append((round(t, 1), rng.randint(6000, 16000), rng.randint(300, 1200), f"e{burst}"))
            t += rng.uniform(20.0, 60.0)
        t += rng.uniform(10.0, 90.0)
        if burst == 12:
            t += 300.0
    return [r for r in rows if r[0] < duration]


def office(seed=6, duration=3600.0):
    """Third held-out trace: a small office sharing one box. Several people chat at once
    (sessions start at random, turns as in `chat`), and a document tool now and then sends a
    burst of retrieval-augmented requests together (large contexts, short answers)."""
    rng = random.Random(seed)
    rows, session = [], 0
    start = rng.expovariate(1.0 / 90.0)
    while start < duration:
        session += 1
        t, context = start, rng.randint(150, 800)
        for _ in range(rng.randint(2, 10)):
            out = int(min(1200, rng.lognormvariate(5.6, 0.6)))
            rows.append((round(t, 1), context, out, f"o{session}"))
            context += out + rng.randint(20, 300)
            t += out / 40.0 + rng.uniform(15.0, 90.0)
        start += rng.expovariate(1.0 / 90.0)
    t = rng.uniform(120.0, 600.0)
    while t < duration:
        session += 1
        for _ in range(rng.randint(3, 8)):
            rows.append((round(t + rng.uniform(0.0, 3.0), 1), rng.randint(4000, 9000), rng.randint(60, 250), f"r{session}"))
        t += rng.uniform(300.0, 900.0)
    return before(rows, duration)


def kb_assistant(seed=7, duration=3600.0):
    """Fourth held-out trace: a team's knowledge-base assistant. A few people ask
    retrieval-augmented questions (3-12 k tokens of retrieved text, 100-600-token answers) with
    follow-ups 30-120 s later; questions come thicker in a 10-minute break; at 40 minutes a
    re-index queues 30 document summaries at once (2-6 k tokens in, 200-400 out)."""
    rng = random.Random(seed)
    rows, session, start = [], 0, rng.uniform(5.0, 60.0)
    while start < duration:
        session += 1
        t = start
        for _ in range(rng.randint(1, 4)):
            rows.append((round(t, 1), rng.randint(3000, 12000), rng.randint(100, 600), f"q{session}"))
            t += rng.uniform(30.0, 120.0)
        busy = 1200.0 <= start < 1800.0
        start += rng.expovariate(1.0 / (25.0 if busy else 110.0))
    for i in range(30):
        rows.append((round(2400.0 + rng.uniform(0.0, 2.0), 1), rng.randint(2000, 6000), rng.randint(200, 400), "index"))
    return before(rows, duration)


def home_lab(seed=8, duration=3600.0):
    """Fifth held-out trace: a box shared at home for an hour. One person codes with a completion
    plugin (typing bursts of 1-4 minutes, a completion every 0.8-4 s of 1.5-6 k tokens in and 8-60
    out, 1-6 minutes of reading between bursts) before 25 and after 40 minutes; another chats now
    and then (2-6 turns, 300-2500 tokens growing, 150-700-token answers, 20-90 s of reading
    between); from 25 to 40 minutes a translation job submits 40 documents, one every 15-25 s
    (1.5-3 k tokens in, 600-1200 out)."""
    rng = random.Random(seed)
    rows = []
    t = rng.uniform(5.0, 40.0)
    while t < duration:
        if 1500.0 <= t < 2400.0:
            t = 2400.0 + rng.uniform(10.0, 90.0)
            continue
        end = t + rng.uniform(60.0, 240.0)
        while t < end:
            rows.append((round(t, 1), rng.randint(1500, 6000), rng.randint(8, 60), "code"))
            t += rng.uniform(0.8, 4.0)
        t += rng.uniform(60.0, 360.0)
    start, session = rng.uniform(60.0, 300.0), 0
    while start < duration:
        session += 1
        t, context = start, rng.randint(300, 900)
        for _ in range(rng.randint(2, 6)):
            out = rng.randint(150, 700)
            rows.append((round(t, 1), min(context, 2500), out, f"chat{session}"))
            context += out + rng.randint(30, 200)
            t += out / 45.0 + rng.uniform(20.0, 90.0)
        start = t + rng.expovariate(1.0 / 300.0)
    t = 1500.0
    for i in range(40):
        rows.append((round(t, 1), rng.randint(1500, 3000), rng.randint(600, 1200), "translate"))
        t += rng.uniform(15.0, 25.0)
    return before(rows, duration)


def parallel_agents(seed=9, duration=3600.0):
    """Sixth held-out trace: an evening of parallel coding agents. Three agents work at once, each
    in sessions of 6-20 turns: the context starts at 3-8 k tokens and grows by 0.5-3 k a turn
    (capped at 32 k), each turn writes 100-800 tokens, and a tool call (tests, a build, a search)
    takes 2-40 s before the next turn; 1-5 minutes between an agent's sessions. From 20 to 30
    minutes they all wait for a person's review (no requests; a session under way stops there);
    after 50 minutes only one agent is left."""
    rng = random.Random(seed)
    rows = []
    for agent in range(3):
        t, session = rng.uniform(5.0, 60.0), 0
        end = duration if agent == 0 else 3000.0
        while t < end:
            if 1200.0 <= t < 1800.0:
                t = 1800.0 + rng.uniform(5.0, 60.0)
                continue
            session += 1
            context = rng.randint(3000, 8000)
            for _ in range(rng.randint(6, 20)):
                if 1200.0 <= t < 1800.0 or t >= end:
                    break
                out = rng.randint(100, 800)
                rows.append((round(t, 1), min(context, 32000), out, f"a{agent}s{session}"))
                context += out + rng.randint(500, 3000)
                # The turn's own time (~38 tok/s decode) and the tool call after it.
                t += out / 38.0 + rng.uniform(2.0, 40.0)
            t += rng.uniform(60.0, 300.0)
    return before(rows, duration)


def pipelines(seed=10, duration=3600.0):
    """Seventh held-out trace: a small office's scheduled pipelines with chat around them, for an
    hour. Every 8-12 minutes a pipeline summarises a batch of 6-20 documents one step after
    another: each step (6-16 k tokens in, 150-500 out) is sent 0.1-1.5 s after the previous answer
    ends. One to three people chat meanwhile: sessions start every 3 minutes on average, 2-6
    turns of a context growing from 200-1500 tokens, 100-600-token answers, 15-60 s of reading."""
    rng = random.Random(seed)
    rows = []
    start, run = rng.uniform(30.0, 120.0), 0
    while start < duration:
        run += 1
        t = start
        for _ in range(rng.randint(6, 20)):
            prompt, out = rng.randint(6000, 16000), rng.randint(150, 500)
            rows.append((round(t, 1), prompt, out, f"p{run}"))
            # The step's own time on a ~1400 tok/s prefill, ~42 tok/s decode box, then the next.
            t += prompt / 1400.0 + out / 42.0 + rng.uniform(0.1, 1.5)
        start += rng.uniform(480.0, 720.0)
    chat_sessions(rng, rows, rng.uniform(5.0, 60.0), duration, (2, 6), (20, 200), 42.0, (15.0, 60.0),
                  lambda: rng.expovariate(1.0 / 180.0), "chat")
    return before(rows, duration)


def ingest(seed=11, duration=3600.0):
    """Eighth held-out trace: a document index built overnight-style in the working day, with
    questions to it. Every 9-15 minutes an ingest run sends 40-160 chunks through three client
    workers at once: each chunk (1-6 k tokens in, 5-60 out: a title and keywords) is sent 0.05-0.3 s
    after the worker's previous answer. Between runs people ask the index: sessions start every
    100 s on average, 1-4 questions of 3-8 k tokens (the retrieved passages) with 100-400-token
    answers and 20-90 s of reading."""
    rng = random.Random(seed)
    rows = []
    start, run = rng.uniform(60.0, 180.0), 0
    while start < duration:
        run += 1
        # Each chunk's own time on a ~3000 tok/s prefill, ~52 tok/s decode box shared by three.
        worker_pool(rng, rows, start, rng.randint(40, 160), 3,
                    lambda: (rng.randint(1000, 6000), rng.randint(5, 60)),
                    lambda prompt, out: 3 * prompt / 3000.0 + out / 52.0, (0.05, 0.3), f"ingest{run}")
        start += rng.uniform(540.0, 900.0)
    start, session = rng.uniform(10.0, 90.0), 0
    while start < duration:
        session += 1
        t = start
        for _ in range(rng.randint(1, 4)):
            out = rng.randint(100, 400)
            rows.append((round(t, 1), rng.randint(3000, 8000), out, f"ask{session}"))
            t += out / 52.0 + rng.uniform(20.0, 90.0)
        start += rng.expovariate(1.0 / 100.0)
    return before(rows, duration)


def doc_review(seed=12, duration=3600.0):
    """Ninth held-out trace: two people reviewing long documents with a local model. Each review
    pastes a document of 6-24 k tokens with a question (a long prefill), then asks 1-5 follow-ups
    of 200-1500 tokens (the document stays in the engine's prompt cache) with 150-700-token
    answers and 30-150 s of reading between; a reviewer starts the next document 2-8 minutes
    after the last answer. The two work independently, so their prompts sometimes meet."""
    rng = random.Random(seed)
    rows = []
    for person in range(2):
        t, review = rng.uniform(20.0, 240.0), 0
        while t < duration:
            review += 1
            session = f"p{person}doc{review}"
            prompt, out = rng.randint(6000, 24000), rng.randint(150, 700)
            rows.append((round(t, 1), prompt, out, session))
            # The document's prefill at ~150 tok/s, then the answer at ~18 tok/s, then reading.
            t += prompt / 150.0 + out / 18.0 + rng.uniform(30.0, 150.0)
            for _ in range(rng.randint(1, 5)):
                prompt, out = rng.randint(200, 1500), rng.randint(150, 700)
                rows.append((round(t, 1), prompt, out, session))
                t += prompt / 150.0 + out / 18.0 + rng.uniform(30.0, 150.0)
            t += rng.uniform(120.0, 480.0)
    return before(rows, duration)


def support_desk(seed=13, duration=3600.0):
    """Tenth held-out trace: a support team's assistant for an hour. Tickets come one every 4-25 s
    at random while the desk is busy (the first 20 and the last 25 minutes) and one every 30-120 s
    in the lull between; each drafts a reply from the ticket's history (2-10 k tokens in, 150-600
    out), and one ticket in six is followed 10-40 s later by a short revision (300-1200 in,
    100-300 out)."""
    rng = random.Random(seed)
    rows, t, ticket = [], rng.uniform(5.0, 30.0), 0
    while t < duration:
        ticket += 1
        rows.append((round(t, 1), rng.randint(2000, 10000), rng.randint(150, 600), f"t{ticket}"))
        if rng.random() < 1.0 / 6.0:
            rows.append((round(t + rng.uniform(10.0, 40.0), 1), rng.randint(300, 1200), rng.randint(100, 300), f"t{ticket}"))
        busy = t < 1200.0 or t > duration - 1500.0
        t += rng.uniform(4.0, 25.0) if busy else rng.uniform(30.0, 120.0)
    return before(rows, duration)


def classroom(seed=14, duration=3000.0):
    """Eleventh held-out trace: a class of 14 students with a shared assistant for a 50-minute
    lesson. Every 6-10 minutes the teacher sets an exercise and most students (60-100 %) ask about
    it within 5-60 s of each other: a question with pasted code or text (500-3000 tokens) and a
    200-900-token answer, then 0-3 follow-ups (the context grown by 100-400 tokens and the answer)
    30-150 s after each answer ends. Between exercises a stray question comes every 1-4 minutes."""
    rng = random.Random(seed)
    rows, exercise, t = [], 0, rng.uniform(60.0, 180.0)
    while t < duration:
        exercise += 1
        for student in range(14):
            if rng.random() > rng.uniform(0.6, 1.0):
                continue
            session = f"e{exercise}s{student}"
            at, context = t + rng.uniform(5.0, 60.0), rng.randint(500, 3000)
            for _ in range(1 + rng.randint(0, 3)):
                out = rng.randint(200, 900)
                rows.append((round(at, 1), context, out, session))
                context += out + rng.randint(100, 400)
                # The answer at ~35 tok/s alongside others, then reading and typing.
                at += out / 35.0 + rng.uniform(30.0, 150.0)
        next_exercise = t + rng.uniform(360.0, 600.0)
        stray = t + rng.uniform(240.0, 360.0)
        while stray < next_exercise:
            rows.append((round(stray, 1), rng.randint(300, 1500), rng.randint(100, 500), f"q{exercise}x{round(stray)}"))
            stray += rng.uniform(60.0, 240.0)
        t = next_exercise
    return before(rows, duration)


def research_agent(seed=15, duration=3600.0):
    """Twelfth held-out trace: a research agent run by two people for an hour. Each task fans out
    5-12 retrieval sub-queries at once (1-4 k tokens in, 50-200 out), then 2-6 s after the last
    one's answer a synthesis request over what came back (8-20 k tokens in, 500-1500 out); the
    person reads the report for 1-4 minutes and starts the next task 20-120 s later."""
    rng = random.Random(seed)
    rows = []
    for person in range(2):
        t, task = rng.uniform(10.0, 200.0), 0
        while t < duration:
            task += 1
            session = f"p{person}task{task}"
            queries = rng.randint(5, 12)
            longest = 0.0
            for _ in range(queries):
                prompt, out = rng.randint(1000, 4000), rng.randint(50, 200)
                rows.append((round(t + rng.uniform(0.0, 0.5), 1), prompt, out, session))
                # Six at a time at ~40 tok/s each, after the prompts are read.
                longest = max(longest, out / 40.0)
            t += longest * (queries / 6.0 + 1.0) + rng.uniform(2.0, 6.0)
            out = rng.randint(500, 1500)
            rows.append((round(t, 1), rng.randint(8000, 20000), out, session))
            t += out / 55.0 + rng.uniform(60.0, 240.0) + rng.uniform(20.0, 120.0)
    return before(rows, duration)


def voice_assistant(seed=16, duration=3600.0):
    """Thirteenth held-out trace: a household's voice assistant for an hour of a busy evening. A
    conversation starts every 20 s-5 min (every 1-3 min on average) and has 1-5 exchanges: each
    sends the system prompt, the tools and the history (800-2500 tokens, growing by 60-200 a turn)
    and gets a short spoken answer (15-120 tokens); the next exchange follows 4-20 s after the
    answer is read out. Twice an hour someone asks for a recipe or a story (a 600-1500-token
    answer)."""
    rng = random.Random(seed)
    rows, t, conversation = [], rng.uniform(5.0, 60.0), 0
    long_asks = sorted(rng.uniform(0.0, duration) for _ in range(2))
    while t < duration:
        conversation += 1
        session, at, context = f"v{conversation}", t, rng.randint(800, 2500)
        for _ in range(rng.randint(1, 5)):
            out = rng.randint(15, 120)
            if long_asks and at >= long_asks[0]:
                long_asks.pop(0)
                out = rng.randint(600, 1500)
            rows.append((round(at, 1), context, out, session))
            context += out + rng.randint(60, 200)
            # The answer at ~38 tok/s, read out at ~3 words a second, then the next question.
            at += out / 38.0 + out / 4.0 + rng.uniform(4.0, 20.0)
        t += min(300.0, max(20.0, rng.expovariate(1.0 / 110.0)))
    return before(rows, duration)


def meeting_notes(seed=17, duration=3600.0):
    """Fourteenth held-out trace: an office's meeting assistant for an hour. Two meetings run one
    after another (25-40 min each, 2-6 min apart); while one runs, the live transcript is cleaned
    up every 8-20 s (300-800 tokens in, 30-100 out). 10-60 s after a meeting ends its transcript
    is summarised (8-30 k tokens in, 600-1500 out), then 1-3 action-item requests over the cached
    transcript follow 5-30 s after each answer (200-600 new tokens on top, 100-400 out). Between
    and during meetings someone chats now and then (one session every 2-8 min, 1-4 turns of
    200-1500 tokens and 100-600-token answers, 20-90 s of reading). Within the hour, the first
    meeting's notes only: the second ends after it."""
    rng = random.Random(seed)
    rows, t = [], rng.uniform(30.0, 120.0)
    for meeting in range(2):
        end = t + rng.uniform(1500.0, 2400.0)
        at = t
        while at < end:
            rows.append((round(at, 1), rng.randint(300, 800), rng.randint(30, 100), f"m{meeting}live"))
            at += rng.uniform(8.0, 20.0)
        at = end + rng.uniform(10.0, 60.0)
        transcript, out = rng.randint(8000, 30000), rng.randint(600, 1500)
        rows.append((round(at, 1), transcript, out, f"m{meeting}notes"))
        context = transcript + out
        for _ in range(rng.randint(1, 3)):
            at += out / 30.0 + rng.uniform(5.0, 30.0)
            context += rng.randint(200, 600)
            out = rng.randint(100, 400)
            rows.append((round(at, 1), context, out, f"m{meeting}notes"))
            context += out
        t = end + rng.uniform(120.0, 360.0)
    chat_sessions(rng, rows, rng.uniform(0.0, 240.0), duration, (1, 4), (50, 300), 30.0, (20.0, 90.0),
                  lambda: rng.uniform(120.0, 480.0), "c")
    return before(rows, duration)


def eval_harness(seed=18, duration=3600.0):
    """Fifteenth held-out trace: a model evaluation run in the evening. Three multiple-choice
    suites of 800-2000 questions (300-2000 tokens in, 1-20 out) through eight client workers, each
    sending its next question 0.05-0.2 s after its answer; a long-generation suite of 100-200
    prompts (200-800 tokens in, 300-900 out) through four workers; 2-6 minutes of scoring after
    each suite; the suites in a random order."""
    rng = random.Random(seed)
    rows, t = [], rng.uniform(20.0, 120.0)
    suites = ["mc0", "mc1", "mc2", "gen"]
    rng.shuffle(suites)
    for suite in suites:
        if suite == "gen":
            # Four streams at ~40 tok/s each after a ~4000 tok/s prefill.
            t = worker_pool(rng, rows, t, rng.randint(100, 200), 4,
                            lambda: (rng.randint(200, 800), rng.randint(300, 900)),
                            lambda prompt, out: prompt / 4000.0 + out / 40.0, (0.05, 0.2), suite)
        else:
            # Eight workers share one ~4000 tok/s prefill: each waits for the others' prompts too.
            t = worker_pool(rng, rows, t, rng.randint(800, 2000), 8,
                            lambda: (rng.randint(300, 2000), rng.randint(1, 20)),
                            lambda prompt, out: 8 * prompt / 4000.0 + out / 50.0, (0.05, 0.2), suite)
        t += rng.uniform(120.0, 360.0)
    return before(rows, duration)


def long_context(seed=19, duration=3600.0):
    """Sixteenth held-out trace: one writer working on a long story with the whole text in the
    context: each session opens with 8000-16000 tokens of it, each turn adds 100-500 tokens of
    instructions and the 300-900-token answer (no prompt cache: every turn prefills it all),
    20-90 s of reading and editing between turns; now and then (1 turn in 8) a 6000-14000-token
    chapter is pasted in; 10-25 turns a session, 2-10 minutes between sessions."""
    rng = random.Random(seed)
    rows, t, session = [], rng.uniform(10.0, 60.0), 0
    while t < duration:
        session += 1
        context = rng.randint(8000, 16000)
        for _ in range(rng.randint(10, 25)):
            if rng.random() < 1.0 / 8.0:
                context += rng.randint(6000, 14000)
            context += rng.randint(100, 500)
            out = rng.randint(300, 900)
            rows.append((round(t, 1), context, out, f"w{session}"))
            context += out
            # The answer streams at ~36 tok/s after the prefill (~2800 tok/s), then reading.
            t += context / 2800.0 + out / 36.0 + rng.uniform(20.0, 90.0)
        t += rng.uniform(120.0, 600.0)
    return [r for r in rows if r[0] < duration]


def translation(seed=20, duration=3600.0):
    """Seventeenth held-out trace: a small agency's document translation for an hour. A batch tool
    splits each document into 800-3000-token chunks and sends them through three client workers,
    each sending its next chunk 0.1-0.5 s after its answer, each answer 0.9-1.2 times its chunk's
    length; 4-9 documents of 10-60 chunks, 1-8 minutes apart while people review them. Alongside,
    two translators chat with the model about terminology."""
    rng = random.Random(seed)
    rows, t = [], rng.uniform(15.0, 90.0)
    for doc in range(rng.randint(4, 9)):
        def chunk():
            prompt = rng.randint(800, 3000)
            return prompt, int(prompt * rng.uniform(0.9, 1.2))
        # Three streams at ~45 tok/s each after a ~3000 tok/s prefill.
        t = worker_pool(rng, rows, t, rng.randint(10, 60), 3, chunk,
                        lambda prompt, out: prompt / 3000.0 + out / 45.0, (0.1, 0.5), f"doc{doc + 1}")
        t += rng.uniform(60.0, 480.0)
    for person in ("a", "b"):
        chat_sessions(rng, rows, rng.uniform(0.0, 300.0), duration, (3, 9), (20, 200), 45.0,
                      (15.0, 120.0), lambda: rng.uniform(300.0, 900.0), f"term-{person}")
    return before(rows, duration)


def email_triage(seed=21, duration=3600.0):
    """Eighteenth held-out trace: a small office's mailbox assistant for an hour. Each email that
    arrives (one every 15-150 s) is classified (500-3000 tokens in, 5-40 out) and one in four gets
    a draft reply (the email and 300 tokens of instructions in, 150-500 out) right after; two to
    four times an hour a mailing list syncs 30-80 emails at once, which two client workers triage
    back to back, each sending the next 0.05-0.3 s after its answer; twice an hour a newsletter
    digest (20-40 k tokens in, 400-1000 out); one person chats with the model now and then."""
    rng = random.Random(seed)
    rows = []

    def triage():
        email = rng.randint(500, 3000)
        if rng.random() < 0.25:
            return [(email, rng.randint(5, 40)), (email + 300, rng.randint(150, 500))]
        return [(email, rng.randint(5, 40))]

    t = rng.uniform(5.0, 60.0)
    while t < duration:
        for prompt, out in triage():
            rows.append((round(t, 1), prompt, out, "mail"))
            # ~2500 tok/s prefill and ~45 tok/s decode before the draft is asked for.
            t += prompt / 2500.0 + out / 45.0 + rng.uniform(0.1, 0.5)
        t += rng.uniform(15.0, 150.0)
    for sync in range(rng.randint(2, 4)):
        jobs = [job for _ in range(rng.randint(30, 80)) for job in triage()]
        drawn = iter(jobs)
        worker_pool(rng, rows, rng.uniform(0.0, duration - 300.0), len(jobs), 2, lambda: next(drawn),
                    lambda prompt, out: 2 * prompt / 2500.0 + out / 40.0, (0.05, 0.3), f"sync{sync + 1}")
    for digest in range(2):
        rows.append((round(rng.uniform(0.0, duration - 60.0), 1), rng.randint(20000, 40000),
                     rng.randint(400, 1000), f"digest{digest + 1}"))
    chat_sessions(rng, rows, rng.uniform(0.0, 600.0), duration, (2, 7), (20, 200), 40.0,
                  (20.0, 90.0), lambda: rng.uniform(300.0, 1200.0), "chat")
    return before(rows, duration)


def home_automation(seed=22, duration=3600.0):
    """Nineteenth held-out trace: a home assistant box through an evening hour. Every 8-40 s an
    automation asks the model to classify a sensor event (300-900 tokens of state and rules in,
    5-25 out); every 5 minutes a summary of the house's events so far (4-9 k tokens in, 150-400
    out); when someone comes home (2-4 times an hour) 3-7 voice commands in quick succession, each
    sending the tools and the conversation so far (1200-2800 tokens, 20-90 out), 3-10 s apart;
    a child's homework chat (4-10 turns, 300-900-token answers, 30-120 s of reading) starts
    within the first 20 minutes."""
    rng = random.Random(seed)
    rows = []
    t = rng.uniform(2.0, 20.0)
    while t < duration:
        rows.append((round(t, 1), rng.randint(300, 900), rng.randint(5, 25), "auto"))
        t += rng.uniform(8.0, 40.0)
    for n, t in enumerate(range(300, int(duration), 300)):
        rows.append((float(t), rng.randint(4000, 9000), rng.randint(150, 400), f"summary{n + 1}"))
    for arrival in range(rng.randint(2, 4)):
        t, context = rng.uniform(0.0, duration - 120.0), rng.randint(1200, 1800)
        for _ in range(rng.randint(3, 7)):
            out = rng.randint(20, 90)
            rows.append((round(t, 1), min(context, 2800), out, f"home{arrival + 1}"))
            context += out + rng.randint(60, 200)
            t += min(context, 2800) / 1800.0 + out / 35.0 + rng.uniform(3.0, 10.0)
    t, context = rng.uniform(0.0, 1200.0), rng.randint(300, 800)
    for _ in range(rng.randint(4, 10)):
        out = rng.randint(300, 900)
        rows.append((round(t, 1), context, out, "homework"))
        context += out + rng.randint(30, 200)
        t += context / 1800.0 + out / 35.0 + rng.uniform(30.0, 120.0)
    return before(rows, duration)


def swe_agent(seed=23, duration=3600.0):
    """Twentieth held-out trace: a coding agent working through a queue of issues for an hour in a
    small company, with a reviewer agent and people asking now and then. Each issue is a session
    of 8-40 turns: the context opens at 5-10 k tokens and each turn adds the answer and a tool's
    output (200-4000 tokens); answers are 40-500 tokens; most tools (reading files, searching)
    return in 0.5-8 s, one turn in six runs the tests for 30-150 s; past 32 k tokens the agent
    compacts its context (a summary request of that size, 500-1200 out) and goes on from 8-12 k.
    5-30 s between issues. When an issue is done, a reviewer agent reads the whole diff (3-9 k
    tokens in, 200-700 out). Three to six times an hour someone asks a question (200-1500 in,
    100-400 out)."""
    rng = random.Random(seed)
    rows = []
    prefill, decode = 1400.0, 22.0
    t, issue = rng.uniform(1.0, 10.0), 0
    while t < duration:
        issue += 1
        context = rng.randint(5000, 10000)
        for _ in range(rng.randint(8, 40)):
            out = rng.randint(40, 500)
            rows.append((round(t, 1), context, out, f"issue{issue}"))
            t += context / prefill + out / decode
            tool_out = rng.randint(200, 4000)
            context += out + tool_out
            t += rng.uniform(30.0, 150.0) if rng.random() < 1 / 6 else rng.uniform(0.5, 8.0)
            if context > 32000:
                summary = rng.randint(500, 1200)
                rows.append((round(t, 1), context, summary, f"issue{issue}"))
                t += context / prefill + summary / decode
                context = rng.randint(8000, 12000)
        review_in, review_out = rng.randint(3000, 9000), rng.randint(200, 700)
        rows.append((round(t + rng.uniform(0.5, 3.0), 1), review_in, review_out, f"review{issue}"))
        t += rng.uniform(5.0, 30.0)
    for n in range(rng.randint(3, 6)):
        asked = round(rng.uniform(0.0, duration), 1)
        rows.append((asked, rng.randint(200, 1500), rng.randint(100, 400), f"ask{n + 1}"))
    return before(rows, duration)


def game_npcs(seed=24, duration=3600.0):
    """Twenty-first held-out trace: a small multiplayer game's server on the box for an hour,
    with the model speaking for its non-player characters. Each player who talks to a character
    sends its persona, the scene and the recent dialogue (600-1600 tokens in, 20-120 out); talk
    comes in exchanges of 2-6 lines, the next line 3-12 s after the answer. The players online
    rise from 2 to 12 over the first 40 minutes and a raid gathers them from minute 40 to 50,
    when the rate doubles; a player starts an exchange every 60-240 s. Every 4-7 minutes a
    quest generator writes a quest from the world's state (2.5-5 k in, 400-900 out)."""
    rng = random.Random(seed)
    rows = []
    prefill, decode = 1500.0, 45.0

    def players(t):
        online = 2.0 + 10.0 * min(t / 2400.0, 1.0)
        return online * (2.0 if 2400.0 <= t < 3000.0 else 1.0)

    t, exchange = 0.0, 0
    while t < duration:
        t += rng.expovariate(players(t) / 150.0)
        exchange += 1
        context, said = rng.randint(600, 1300), t
        for _ in range(rng.randint(2, 6)):
            out = rng.randint(20, 120)
            rows.append((round(said, 1), min(context, 1600), out, f"npc{exchange}"))
            context += out + rng.randint(10, 60)
            said += min(context, 1600) / prefill + out / decode + rng.uniform(3.0, 12.0)
    t = rng.uniform(30.0, 240.0)
    quest = 0
    while t < duration:
        quest += 1
        rows.append((round(t, 1), rng.randint(2500, 5000), rng.randint(400, 900), f"quest{quest}"))
        t += rng.uniform(240.0, 420.0)
    return before(rows, duration)


def every(rng, rows, first, gap, prompt, out, label, duration):
    """Requests from a time drawn from `first` until `duration`, each `gap` after the last (each
    a (low, high) range to draw from), of `prompt` tokens in and `out` out, labelled `label` and
    their count."""
    t, n = rng.uniform(*first), 0
    while t < duration:
        n += 1
        rows.append((round(t, 1), rng.randint(*prompt), rng.randint(*out), f"{label}{n}"))
        t += rng.uniform(*gap)


def camera_vlm(seed=25, duration=3600.0):
    """Twenty-second held-out trace: a home's camera box for an hour of a weekday afternoon, a
    vision-language model describing what four cameras see. Each camera sends a still every
    50-70 s (an image of 1200-1500 tokens with a short instruction, 15-60 tokens out). Motion
    starts an event (about one per camera every 6 minutes, 20-90 s long) in which the camera sends
    a frame every 1.5-4 s (the same size, 30-150 out); a parcel delivery at minute 18 and the
    family coming home at minute 44 set off every camera at once for 1-3 minutes. A person asks
    about the footage now and then (2-5 k in, 100-400 out), and at minute 56 asks for a summary of
    the hour from the event log (14-22 k in, 500-1100 out)."""
    rng = random.Random(seed)
    rows = []

    def frame(t, out, label):
        rows.append((round(t, 1), rng.randint(1200, 1500) + rng.randint(20, 80), out, label))

    def motion(t, end, label):
        """Frames every 1.5-4 s from `t` until `end`; returns when the last one was sent."""
        while t < end:
            frame(t, rng.randint(30, 150), label)
            t += rng.uniform(1.5, 4.0)
        return t

    for cam in range(1, 5):
        t = rng.uniform(0.0, 60.0)
        while t < duration:
            frame(t, rng.randint(15, 60), f"still{cam}")
            t += rng.uniform(50.0, 70.0)
        t, event = rng.expovariate(1.0 / 360.0), 0
        while t < duration:
            event += 1
            t = motion(t, t + rng.uniform(20.0, 90.0), f"cam{cam}e{event}")
            t += rng.expovariate(1.0 / 360.0)
    for start in (18 * 60.0, 44 * 60.0):
        for cam in range(1, 5):
            t, end = start + rng.uniform(0.0, 20.0), start + rng.uniform(60.0, 180.0)
            motion(t, end, f"all{int(start)}c{cam}")
    every(rng, rows, (120.0, 600.0), (300.0, 900.0), (2000, 5000), (100, 400), "ask", duration)
    summary_t = 56 * 60.0 + rng.uniform(0.0, 30.0)
    rows.append((round(summary_t, 1), rng.randint(14000, 22000), rng.randint(500, 1100), "summary"))
    return before(rows, duration)


def newsroom(seed=26, duration=3600.0):
    """Twenty-third held-out trace: a small newsroom's wire desk for an hour of an afternoon.
    Every 15-75 s a wire story comes in and is tagged and routed (500-2500 tokens in, 10-40
    out). At minute 25 news breaks: for 6-10 minutes three editors each ask for rewrites, fact
    boxes and headlines on the running story (2-6 k tokens in, 200-600 out), each reading the
    answer as it streams and asking again 2-10 s after it ends, while the wire comes three times
    as fast. Every 8-15 minutes a story is translated for the partner paper (1500-4000 in,
    1000-2500 out: long decode), and at minute 50 the desk asks for the day's digest (20-30 k
    in, 800-1500 out)."""
    rng = random.Random(seed)
    rows = []
    breaking, breaking_end = 25 * 60.0, 25 * 60.0 + rng.uniform(360.0, 600.0)
    t, story = rng.uniform(0.0, 30.0), 0
    while t < duration:
        story += 1
        rows.append((round(t, 1), rng.randint(500, 2500), rng.randint(10, 40), f"wire{story}"))
        gap = rng.uniform(15.0, 75.0)
        t += gap / 3.0 if breaking <= t < breaking_end else gap
    for editor in range(1, 4):
        at, ask = breaking + rng.uniform(5.0, 60.0), 0
        while at < breaking_end:
            ask += 1
            out = rng.randint(200, 600)
            rows.append((round(at, 1), rng.randint(2000, 6000), out, f"ed{editor}a{ask}"))
            # The answer streams at ~40 tok/s and is read as it comes; the next ask follows.
            at += out / 40.0 + rng.uniform(2.0, 10.0)
    every(rng, rows, (60.0, 600.0), (480.0, 900.0), (1500, 4000), (1000, 2500), "tr", duration)
    digest_t = 50 * 60.0 + rng.uniform(0.0, 60.0)
    rows.append((round(digest_t, 1), rng.randint(20000, 30000), rng.randint(800, 1500), "digest"))
    return before(rows, duration)


def subtitles(seed=27, duration=3600.0):
    """Twenty-fourth held-out trace: a small studio's subtitling box for an hour. Two workers each
    take a video and translate its transcript in chunks of about forty lines (600-1200 tokens in,
    500-1000 out), each chunk sent as soon as the last one is back; a video is 8-30 chunks, and a
    worker waits 1-6 minutes between videos. Every 5-12 minutes a reviewer asks for a glossary
    check against the style guide (3-6 k in, 100-300 out)."""
    rng = random.Random(seed)
    rows = []
    for worker in range(1, 3):
        t, video = rng.uniform(0.0, 120.0), 0
        while t < duration:
            video += 1
            for chunk in range(rng.randint(8, 30)):
                out = rng.randint(500, 1000)
                prompt = rng.randint(600, 1200)
                rows.append((round(t, 1), prompt, out, f"w{worker}v{video}c{chunk + 1}"))
                # The chunk back at ~42 tok/s (two streams share the card), then the next.
                t += prompt / 2200.0 + out / 42.0 + rng.uniform(0.2, 1.5)
            t += rng.uniform(60.0, 360.0)
    every(rng, rows, (120.0, 600.0), (300.0, 720.0), (3000, 6000), (100, 300), "review", duration)
    return before(rows, duration)


def autocomplete(seed=28, duration=3600.0):
    """Twenty-fifth held-out trace: a five-person team's code-completion server for an hour of a
    working afternoon. While a developer types, the editor asks for a fill-in-the-middle
    completion 0.6-3 s after each pause (the file around the cursor: 1500-4000 tokens in, 8-64
    out), in bursts of 5-40 requests; between bursts 10-120 s of reading or thinking. Each
    developer leaves for a meeting or a break once in the hour (10-25 minutes), and now and then
    asks the chat panel about the code (2-8 k in, 150-600 out; every 4-15 minutes each)."""
    rng = random.Random(seed)
    rows = []
    for dev in range(1, 6):
        away = rng.uniform(300.0, 3000.0)
        back = away + rng.uniform(600.0, 1500.0)
        t, burst = rng.uniform(0.0, 90.0), 0
        while t < duration:
            if away <= t < back:
                t = back
                continue
            burst += 1
            for n in range(rng.randint(5, 40)):
                rows.append((round(t, 1), rng.randint(1500, 4000), rng.randint(8, 64), f"d{dev}b{burst}r{n + 1}"))
                t += rng.uniform(0.6, 3.0)
            t += rng.uniform(10.0, 120.0)
        t, ask = rng.uniform(60.0, 600.0), 0
        while t < duration:
            if not away <= t < back:
                ask += 1
                rows.append((round(t, 1), rng.randint(2000, 8000), rng.randint(150, 600), f"d{dev}ask{ask}"))
            t += rng.uniform(240.0, 900.0)
    return before(rows, duration)


def discord_bot(seed=29, duration=3600.0):
    """Twenty-sixth held-out trace: a large hobby community's chat bot for an evening hour.
    Members mention the bot in the server's channels; one mention draws others (a thread heats
    up), so mentions come in self-exciting runs: a base rate of one per 30 s, each mention adding
    0.018 per second that fades with a 45 s time constant (on average 0.8 more), at most one a
    second. Each sends the channel's recent messages (400-2500 tokens) and gets a quip (20-120
    tokens, 70 %) or an explanation (200-700). Every 15 minutes (within a minute) the bot
    digests the channels since the last digest (9-14 k tokens in, 300-700 out)."""
    rng = random.Random(seed)
    rows = []
    t, excitation, step, mention = 0.0, 0.0, 0.5, 0
    while t < duration:
        rate = min(1.0 / 30.0 + excitation, 1.0)
        if rng.random() < rate * step:
            mention += 1
            out = rng.randint(20, 120) if rng.random() < 0.7 else rng.randint(200, 700)
            user = rng.randint(1, 40)
            rows.append((round(t, 1), rng.randint(400, 2500), out, f"u{user}m{mention}"))
            excitation += 0.018
        excitation *= math.exp(-step / 45.0)
        t += step
    t, digest = 900.0, 0
    while t < duration:
        digest += 1
        rows.append((round(t + rng.uniform(-60.0, 60.0), 1), rng.randint(9000, 14000), rng.randint(300, 700), f"digest{digest}"))
        t += 900.0
    return before(rows, duration)


def bench_sweep(seed=30, duration=3600.0):
    """Twenty-seventh held-out trace: an owner benchmarking the box for an evening hour, one
    client at a time, each request sent as the last is answered (times from a reference card that
    prefills 3000 tokens/s and decodes 45/s, with 0.2-0.5 s of client overhead). A round is a
    prefill sweep (512 to 32768 tokens in, doubling, five of each, 128 out), a decode sweep (512
    in, 256 to 2048 out, three of each), then four clients at once (eight requests each, 1024 in,
    256 out, each client's next sent as its last is answered, at half the reference rate); then
    2-6 minutes of reading the numbers with a few chat questions (300-1500 in, 100-400 out), or,
    after every other round, 8-15 minutes away from the desk."""
    rng = random.Random(seed)
    rows = []

    def served(t, prompt, out, label, slow=1.0):
        rows.append((round(t, 1), prompt, out, label))
        return t + slow * (prompt / 3000.0 + out / 45.0) + rng.uniform(0.2, 0.5)

    t, rnd = rng.uniform(30.0, 90.0), 0
    while t < duration:
        rnd += 1
        for k in range(7):
            for rep in range(5):
                t = served(t, 512 << k, 128, f"r{rnd}p{512 << k}n{rep + 1}")
        for k in range(4):
            for rep in range(3):
                t = served(t, 512, 256 << k, f"r{rnd}d{256 << k}n{rep + 1}")
        ends = []
        for client in range(1, 5):
            c = t + rng.uniform(0.0, 0.5)
            for n in range(8):
                c = served(c, 1024, 256, f"r{rnd}c{client}n{n + 1}", slow=2.0)
            ends.append(c)
        t = max(ends)
        if rnd % 2 == 1:
            pause = rng.uniform(120.0, 360.0)
            for q in range(rng.randint(1, 3)):
                at = t + rng.uniform(10.0, pause - 10.0)
                rows.append((round(at, 1), rng.randint(300, 1500), rng.randint(100, 400), f"r{rnd}q{q + 1}"))
        else:
            pause = rng.uniform(480.0, 900.0)
        t += pause
    return before(rows, duration)


if __name__ == "__main__":
    write("chat.csv", SIMPLE_HEADER, chat())
    write("agent.csv", SIMPLE_HEADER, agent())
    write("batch.csv", SIMPLE_HEADER, batch())
    write("azure-style-holdout.csv", "TIMESTAMP,ContextTokens,GeneratedTokens", azure_style())
    write("code-assist-holdout.csv", SIMPLE_HEADER, code_assist())
    write("office-holdout.csv", SIMPLE_HEADER, office())
    write("kb-assistant-holdout.csv", SIMPLE_HEADER, kb_assistant())
    write("home-lab-holdout.csv", SIMPLE_HEADER, home_lab())
    write("parallel-agents-holdout.csv", SIMPLE_HEADER, parallel_agents())
    write("pipelines-holdout.csv", SIMPLE_HEADER, pipelines())
    write("ingest-holdout.csv", SIMPLE_HEADER, ingest())
    write("doc-review-holdout.csv", SIMPLE_HEADER, doc_review())
    write("support-desk-holdout.csv", SIMPLE_HEADER, support_desk())
    write("classroom-holdout.csv", SIMPLE_HEADER, classroom())
    write("research-agent-holdout.csv", SIMPLE_HEADER, research_agent())
    write("voice-assistant-holdout.csv", SIMPLE_HEADER, voice_assistant())
    write("meeting-notes-holdout.csv", SIMPLE_HEADER, meeting_notes())
    write("eval-harness-holdout.csv", SIMPLE_HEADER, eval_harness())
    write("long-context-holdout.csv", SIMPLE_HEADER, long_context())
    write("translation-holdout.csv", SIMPLE_HEADER, translation())
    write("email-triage-holdout.csv", SIMPLE_HEADER, email_triage())
    write("home-automation-holdout.csv", SIMPLE_HEADER, home_automation())
    write("swe-agent-holdout.csv", SIMPLE_HEADER, swe_agent())
    write("game-npcs-holdout.csv", SIMPLE_HEADER, game_npcs())
    write("camera-vlm-holdout.csv", SIMPLE_HEADER, camera_vlm())
    write("newsroom-holdout.csv", SIMPLE_HEADER, newsroom())
    write("subtitles-holdout.csv", SIMPLE_HEADER, subtitles())
    write("autocomplete-holdout.csv", SIMPLE_HEADER, autocomplete())
    write("discord-bot-holdout.csv", SIMPLE_HEADER, discord_bot())
    write("bench-sweep-holdout.csv", SIMPLE_HEADER, bench_sweep())
