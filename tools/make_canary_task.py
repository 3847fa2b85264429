#!/usr/bin/env python3
"""The canary task: synthetic GSM8K-style word problems for `tachyon eval`.

Each record is {"question", "answer"}; the answer is a worked solution, one arithmetic step per
line, then "#### N" (the format lm-eval's gsm8k task scores). The task is small on purpose: a few
names, objects and step templates, integers 0..999, no negatives, division only when exact, so a
model of a few million parameters can learn it and a regression in the engine (a wrong kernel, a
broken KV cache) shows up as an accuracy drop on a model that had learned it.

Deterministic byte for byte for a seed: random.Random seeded from a string (sha512, not the
process hash seed), json.dumps with fixed separators. The test split comes from its own stream,
so the first K test problems are the same whatever --train and --test are (that is how the
committed sample tests/data/canary/test_sample.jsonl stays reproducible); train problems that
repeat a test question are skipped, and disjointness is asserted before writing.

  python3 tools/make_canary_task.py --seed 0 --train 20000 --test 1000 --out /tmp/canary
  python3 tools/make_canary_task.py --write-sample   # regenerates tests/data/canary/test_sample.jsonl
"""
import argparse
import json
import os
import random
import sys

NAMES = [("Mia", "she"), ("Liam", "he"), ("Emma", "she"), ("Noah", "he"), ("Ava", "she"),
         ("Omar", "he"), ("Zoe", "she"), ("Leo", "he"), ("Nina", "she"), ("Sam", "he")]
OBJECTS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "cards", "coins"]
CONTAINERS = ["bags", "boxes", "packs"]
FRIENDS = ["a friend", "{poss} sister", "{poss} brother", "a neighbor", "the teacher"]
MAX_VALUE = 999
SAMPLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "canary",
                           "test_sample.jsonl")
SAMPLE_SEED, SAMPLE_SIZE = 0, 40


class Person:
    def __init__(self, name, subject):
        self.name = name
        self.s = subject                                   # she / he
        self.S = subject.capitalize()                      # She / He
        self.poss = "her" if subject == "she" else "his"   # her / his


# Each step takes the current count and returns (question sentence, solution lines, new count),
# or None when it cannot apply to this count (it would go negative, over MAX_VALUE or divide
# with a remainder).
def step_buy_groups(rng, p, obj, cur):
    groups, each = rng.randint(2, 6), rng.randint(2, 10)
    bought = groups * each
    if cur + bought > MAX_VALUE:
        return None
    container = rng.choice(CONTAINERS)
    return (f"{p.S} buys {groups} {container} with {each} {obj} each.",
            [f"{p.name} buys {groups} * {each} = {bought} {obj}.",
             f"{p.S} has {cur} + {bought} = {cur + bought} {obj}."], cur + bought)


def step_gain(rng, p, obj, cur):
    k = rng.randint(2, 30)
    if cur + k > MAX_VALUE:
        return None
    friend = rng.choice(FRIENDS).format(poss=p.poss)
    return (f"{p.S} gets {k} more {obj} from {friend}.",
            [f"After getting {k} more {p.s} has {cur} + {k} = {cur + k} {obj}."], cur + k)


def step_give_away(rng, p, obj, cur):
    if cur < 2:
        return None
    k = rng.randint(2, min(30, cur))
    return (f"{p.S} gives away {k} {obj}.",
            [f"After giving away {k} {p.s} has {cur} - {k} = {cur - k} {obj}."], cur - k)


def step_lose(rng, p, obj, cur):
    if cur < 2:
        return None
    k = rng.randint(2, min(15, cur))
    return (f"{p.S} loses {k} {obj}.",
            [f"After losing {k} {p.s} has {cur} - {k} = {cur - k} {obj}."], cur - k)


def step_multiply(rng, p, obj, cur):
    factor = rng.choice([2, 3])
    if cur * factor > MAX_VALUE:
        return None
    verb = "doubles" if factor == 2 else "triples"
    return (f"The number of {obj} {p.s} has {verb}.",
            [f"That makes {cur} * {factor} = {cur * factor} {obj}."], cur * factor)


def step_share(rng, p, obj, cur):
    divisors = [g for g in range(2, 6) if cur > 0 and cur % g == 0]
    if not divisors:
        return None
    g = rng.choice(divisors)
    return (f"{p.S} splits {p.poss} {obj} equally into {g} groups and keeps one group.",
            [f"{p.S} keeps {cur} / {g} = {cur // g} {obj}."], cur // g)


STEPS = [step_buy_groups, step_gain, step_give_away, step_lose, step_multiply, step_share]


def make_problem(rng):
    name, subject = rng.choice(NAMES)
    p = Person(name, subject)
    obj = rng.choice(OBJECTS)
    cur = rng.randint(2, 60)
    opening = rng.choice([f"{name} has {cur} {obj}.", f"{name} starts with {cur} {obj}."])
    sentences, lines = [opening], []
    target_lines = rng.randint(2, 4)  # arithmetic lines in the solution
    while len(lines) < target_lines:
        step = rng.choice(STEPS)(rng, p, obj, cur)
        if step is None or len(lines) + len(step[1]) > target_lines:
            continue
        sentence, step_lines, cur = step
        if len(sentences) > 1 and rng.random() < 0.5:
            sentence = "Then " + sentence[0].lower() + sentence[1:]
        sentences.append(sentence)
        lines.extend(step_lines)
    assert 0 <= cur <= MAX_VALUE
    sentences.append(f"How many {obj} does {name} have now?")
    return {"question": " ".join(sentences), "answer": "\n".join(lines) + f"\n#### {cur}"}


def make_split(seed, split, count, exclude):
    """count distinct problems from the split's own stream, none of whose questions is in exclude."""
    rng = random.Random(f"canary-{seed}-{split}")
    seen, records = set(exclude), []
    attempts = 0
    while len(records) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            sys.exit(f"could not find {count} distinct {split} problems; ask for fewer")
        record = make_problem(rng)
        if record["question"] in seen:
            continue
        seen.add(record["question"])
        records.append(record)
    return records


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=True, separators=(", ", ": ")) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=20000, help="train problems")
    parser.add_argument("--test", type=int, default=1000, help="test problems")
    parser.add_argument("--out", help="folder for train.jsonl and test.jsonl")
    parser.add_argument("--write-sample", action="store_true",
                        help=f"write the first {SAMPLE_SIZE} test problems of seed {SAMPLE_SEED} to {SAMPLE_PATH}")
    args = parser.parse_args()
    if args.write_sample:
        write_jsonl(SAMPLE_PATH, make_split(SAMPLE_SEED, "test", SAMPLE_SIZE, set()))
        print(f"wrote {SAMPLE_SIZE} problems to {os.path.normpath(SAMPLE_PATH)}")
        return
    if not args.out:
        parser.error("--out is required (or --write-sample)")
    test = make_split(args.seed, "test", args.test, set())
    train = make_split(args.seed, "train", args.train, {r["question"] for r in test})
    assert not ({r["question"] for r in train} & {r["question"] for r in test}), "train and test overlap"
    os.makedirs(args.out, exist_ok=True)
    write_jsonl(os.path.join(args.out, "train.jsonl"), train)
    write_jsonl(os.path.join(args.out, "test.jsonl"), test)
    print(f"wrote {len(train)} train and {len(test)} test problems to {args.out}")


if __name__ == "__main__":
    main()
