"""The benchmarks' fixed chat prompts, shared so offline, profile and serving runs measure the same work."""

from __future__ import annotations

from typing import Any

TOPICS = ["the moon", "tea", "rivers", "old clocks", "bicycles", "winter", "bread", "libraries"]
ASKS = [
    "Write two sentences about {}.",
    "Explain {} to a child.",
    "List three facts about {}.",
    "Tell a short story about {}.",
    "Why do people like {}?",
    "Describe {} in detail.",
    "What is the history of {}?",
    "Give advice about {}.",
]


def question(i: int) -> str:
    """The i-th question: every ask over one topic, then the next topic."""
    return ASKS[i % len(ASKS)].format(TOPICS[(i // len(ASKS)) % len(TOPICS)])


def chat_prompt_ids(tokenizer: Any, count: int) -> list[list[int]]:
    """`count` questions as chat-templated token ids."""
    prompts = []
    for i in range(count):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": question(i)}], add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # transformers 5 returns a BatchEncoding
        prompts.append([int(t) for t in ids])
    return prompts


# ---- edit-a-given-text prompts (load (e)): the answer mostly repeats the prompt, where n-gram lookup pays --

EDIT_PARAGRAPHS = [
    "The town libary opens at nine on weekdays and at ten on Saturdays. Members can borow up to twelve "
    "books at a time, and each loan lasts three weeks unless somone else has reserved the book. Renewals "
    "can be made at the front desk, by phone, or on the website, as long as the item is not overdue by more "
    "then a month. The reading room on the first floor is quiet at all times; please keep phones on silent "
    "and take calls in the corridor. Children under eight must be acompanied by an adult in every part of "
    "the building exept the picture book corner, where a member of staff is always present. The local "
    "history collection is kept in the basement and can be viewed by apointment. Photocopies cost ten "
    "cents a page, and scans to a memory stick are free. Lost cards are replaced for two dollars, and the "
    "first replacement each year is free of charge. Every Thursday evening the library hosts a book club "
    "that meets in the garden room; new members are always welcome and no preperation is needed.",
    "Bread has been baked for thousands of years, and the basic recipe has hardly changed. Flour, water, "
    "salt and yeast are mixed into a dough, which is kneaded until it becomes smooth and elastic. The "
    "dough is then left to rise in a warm place untill it has roughly doubled in size. After the first "
    "rise, the baker knocks the air out of the dough, shapes it into a loaf, and leaves it to rise a "
    "second time. The oven should be very hot, and many bakers put a tray of water on the bottom shelf so "
    "that the steam helps the crust to form. A small loaf takes about thirty minutes to bake, while a "
    "large one can take close to an hour. The loaf is ready when it sounds holow if you tap the bottom. "
    "It is tempting to cut the bread strait away, but it keeps cooking as it cools, so waiting at least "
    "half an hour gives a better texture. Sourdough works in the same way, exept that the yeast comes "
    "from a starter that is fed with flour and water every day and can be kept alive for many years.",
    "Rivers shape the land they flow through. Near their source, in the hills, they are usualy narrow "
    "and fast, and they cut deep valleys into the rock. Further downstream the slope becomes gentler, the "
    "water slows down, and the river begins to wind from side to side in wide loops called meanders. Over "
    "time a meander can be cut off from the main channel, leaving a curved lake behind. When a river "
    "reaches the sea it drops the sand and mud it has carried, and in some places this material builds up "
    "into a delta with many small channels. Rivers have always been important to people. They provide "
    "water for drinking and for crops, fish for food, and a way to travel and trade. Many of the worlds "
    "great cities were built on the banks of a river for exactly these reasons. But rivers can also be "
    "dangerous: after heavy rain they may burst their banks and flood the surounding fields and towns, "
    "which is why so many of them are now lined with walls and embankments.",
    "Old mechanical clocks are driven by a weight or a spring. As the weight falls or the spring unwinds, "
    "it turns a train of gears, and the escapement lets the gears move forward by one small step at a "
    "time. The pendulum, or in smaller clocks the balance wheel, sets the pace of those steps, so the "
    "lenght of the pendulum decides how fast the clock runs. A longer pendulum swings more slowly. To make "
    "a clock run faster, the bob at the bottom of the pendulum is raised a little by turning a small nut. "
    "Clocks need to be wound regularly, some every day and others once a week, and they should be kept "
    "level, or the tick will sound uneven. Dust and dried oil are the main enemys of an old clock, and a "
    "clock that has stopped is often only in need of a careful cleaning. Collectors value clocks by their "
    "maker, their age and the condition of the case and dial, and a clock in working order with its "
    "original parts is worth far more then one that has been heavily repaired over the years.",
]

EDIT_CODE = [
    '''def count_words(lines):
    """Count how often each word appears in the given lines."""
    totals = {}
    x = 0
    for line in lines:
        for word in line.split():
            word = word.strip(".,;:!?").lower()
            if not word:
                continue
            totals[word] = totals.get(word, 0) + 1
            x += 1
    most = sorted(totals.items(), key=lambda item: item[1], reverse=True)
    print(f"{x} words, {len(totals)} distinct")
    for word, seen in most[:10]:
        share = seen / x if x else 0.0
        print(f"{word:<20} {seen:>6} {share:.1%}")
    return totals, x
''',
    '''class Shelf:
    """A library shelf with a fixed number of slots."""

    def __init__(self, slots):
        self.slots = slots
        self.books = []
        self.x = 0

    def add(self, title):
        if len(self.books) >= self.slots:
            raise ValueError(f"the shelf is full ({self.slots} books)")
        self.books.append(title)
        self.x += 1
        return self.x

    def remove(self, title):
        if title not in self.books:
            raise KeyError(title)
        self.books.remove(title)
        self.x -= 1
        return self.x

    def report(self):
        free = self.slots - self.x
        return f"{self.x} books on the shelf, {free} slots free"
''',
    '''def read_temperatures(path):
    """Read one temperature per line, skipping blank lines and comments."""
    readings = []
    x = 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                readings.append(float(line))
            except ValueError:
                print(f"skipping a bad line: {line!r}")
                continue
            x += 1
    if x == 0:
        raise ValueError(f"no readings in {path}")
    mean = sum(readings) / x
    low, high = min(readings), max(readings)
    print(f"{x} readings from {path}: mean {mean:.1f}, low {low:.1f}, high {high:.1f}")
    return readings
''',
    '''def schedule_rides(riders, bikes):
    """Pair riders with free bikes in order; riders without a bike wait."""
    waiting = []
    rides = []
    x = 0
    free = list(bikes)
    for rider in riders:
        if not free:
            waiting.append(rider)
            continue
        bike = free.pop(0)
        rides.append((rider, bike))
        x += 1
    for rider, bike in rides:
        print(f"ride {rider} on bike {bike}")
    if waiting:
        print(f"{len(waiting)} riders wait: " + ", ".join(waiting))
    print(f"{x} rides started, {len(free)} bikes left")
    return rides, waiting, x
''',
]

_PARAGRAPH_ASKS = [
    "Fix the typos in this paragraph and return it in full:\n\n{}",
    "Correct the spelling mistakes in the following text. Change nothing else and repeat the whole text:"
    "\n\n{}",
]
_CODE_ASKS = [
    "Repeat the following code with the variable x renamed to count:\n\n```python\n{}```",
    "Return this code in full, unchanged except that the variable x is renamed to total:\n\n```python\n{}```",
]


def edit_request(i: int) -> str:
    """The i-th edit request: paragraphs and code in turn, every text once per wording, then again."""
    texts, asks = (EDIT_PARAGRAPHS, _PARAGRAPH_ASKS) if i % 2 == 0 else (EDIT_CODE, _CODE_ASKS)
    j = i // 2
    return asks[(j // len(texts)) % len(asks)].format(texts[j % len(texts)])
