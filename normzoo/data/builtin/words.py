"""The fixed word tables of the built-in language: English lemmas by part of speech (nouns by
semantic class, verbs with their forms and the classes they take), the target's suffixes, and
the letters its stems are made of.

They are constant data, typed in here and read from nowhere else, because the corpus must be
the same on every machine: :mod:`~normzoo.data.builtin.language` draws the target lexicon from
these tables with a fixed seed, so any edit here (a word added, a table reordered) changes the
language and every split generated from it. The language's checks refuse tables that would make
the English ambiguous.
"""

from __future__ import annotations

# --------------------------------------------------------------------------------------------
# Target morphology. Stems always end in a vowel and every suffix starts with a consonant, so
# words read as stem + ending; the lexicon builder still checks every surface form is unique.

NOUN_PLURAL_SUFFIX = "n"
#: Determiner and adjective endings by (gender, plural).
AGREEMENT_SUFFIXES: dict[tuple[int, bool], str] = {
    (0, False): "l",
    (1, False): "r",
    (0, True): "li",
    (1, True): "ri",
}
#: Verb (and copula) endings by (past, subject plural).
VERB_SUFFIXES: dict[tuple[bool, bool], str] = {
    (False, False): "t",
    (False, True): "nt",
    (True, False): "sa",
    (True, True): "san",
}

_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_CODAS = "lmnrs"

# --------------------------------------------------------------------------------------------
# English side. Nouns by semantic class: verbs restrict their subjects and objects to classes so
# that most sentences are plausible ("the girl eats an apple", not "the apple eats a girl").

_NOUNS: dict[str, tuple[str, ...]] = {
    "animal": (
        "dog", "cat", "bird", "horse", "cow", "pig", "goat", "duck", "fox", "wolf", "bear",
        "lion", "tiger", "rabbit", "mouse", "snake", "frog", "monkey", "elephant", "owl", "bee",
        "ant", "spider", "goose", "donkey", "camel", "eagle", "turtle", "squirrel", "chicken",
        "parrot", "dragon",
    ),
    "person": (
        "man", "woman", "child", "boy", "girl", "baby", "teacher", "student", "doctor",
        "farmer", "king", "queen", "soldier", "sailor", "baker", "painter", "singer", "driver",
        "friend", "neighbor", "stranger", "guest", "brother", "sister", "mother", "father",
        "uncle", "aunt", "cousin", "prince", "princess", "nurse", "pilot", "thief", "wizard",
    ),
    "place": (
        "house", "garden", "river", "lake", "mountain", "hill", "forest", "field", "road",
        "bridge", "village", "city", "town", "castle", "church", "school", "market", "shop",
        "station", "island", "beach", "farm", "park", "kitchen", "library", "tower", "cave",
        "valley", "harbor", "palace",
    ),
    "thing": (
        "tree", "flower", "boat", "ship", "car", "train", "bus", "bicycle", "ball", "box",
        "book", "letter", "table", "chair", "bed", "door", "window", "wall", "lamp", "clock",
        "cup", "bottle", "plate", "knife", "spoon", "basket", "bag", "coat", "hat", "shoe",
        "shirt", "key", "ring", "coin", "stone", "stick", "rope", "candle", "mirror", "picture",
        "toy", "doll", "kite", "drum", "guitar", "piano", "pencil", "map", "gift", "flag",
        "tent", "cloud", "star", "leaf", "feather", "umbrella", "blanket", "bell", "wheel",
        "ladder", "bucket", "hammer", "sword", "shield", "crown", "jar", "pillow",
    ),
    "food": (
        "apple", "cake", "egg", "banana", "potato", "tomato", "carrot", "onion", "pie",
        "cookie", "sandwich", "lemon", "cherry", "pear", "peach", "plum", "melon", "nut",
        "grape",
    ),
}
_IRREGULAR_PLURALS = {
    "man": "men", "woman": "women", "child": "children", "mouse": "mice", "goose": "geese",
    "wolf": "wolves", "thief": "thieves", "knife": "knives", "leaf": "leaves",
    "potato": "potatoes", "tomato": "tomatoes",
}

_ANIMATE = ("animal", "person")
_OBJECTS = ("thing", "food")
_ALL = ("animal", "person", "place", "thing", "food")
_PLACES_AND_THINGS = ("place", "thing")

# (base = present plural, third person singular, past, object classes).
_TRANSITIVE: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("see", "sees", "saw", _ALL), ("find", "finds", "found", _ALL),
    ("watch", "watches", "watched", _ALL), ("like", "likes", "liked", _ALL),
    ("love", "loves", "loved", _ALL), ("hate", "hates", "hated", _ALL),
    ("want", "wants", "wanted", _ALL), ("need", "needs", "needed", _ALL),
    ("remember", "remembers", "remembered", _ALL), ("forget", "forgets", "forgot", _ALL),
    ("draw", "draws", "drew", _ALL), ("paint", "paints", "painted", _ALL),
    ("admire", "admires", "admired", _ALL), ("protect", "protects", "protected", _ALL),
    ("ignore", "ignores", "ignored", _ALL), ("miss", "misses", "missed", _ALL),
    ("choose", "chooses", "chose", _ALL), ("keep", "keeps", "kept", _ALL),
    ("visit", "visits", "visited", (*_ANIMATE, "place")),
    ("know", "knows", "knew", (*_ANIMATE, "place")),
    ("follow", "follows", "followed", _ANIMATE), ("chase", "chases", "chased", _ANIMATE),
    ("help", "helps", "helped", _ANIMATE), ("call", "calls", "called", _ANIMATE),
    ("meet", "meets", "met", _ANIMATE), ("greet", "greets", "greeted", _ANIMATE),
    ("teach", "teaches", "taught", _ANIMATE), ("feed", "feeds", "fed", _ANIMATE),
    ("bite", "bites", "bit", _ANIMATE), ("hug", "hugs", "hugged", _ANIMATE),
    ("kiss", "kisses", "kissed", _ANIMATE), ("trust", "trusts", "trusted", _ANIMATE),
    ("take", "takes", "took", _OBJECTS), ("hold", "holds", "held", _OBJECTS),
    ("carry", "carries", "carried", _OBJECTS), ("push", "pushes", "pushed", _OBJECTS),
    ("pull", "pulls", "pulled", _OBJECTS), ("buy", "buys", "bought", _OBJECTS),
    ("sell", "sells", "sold", _OBJECTS), ("bring", "brings", "brought", _OBJECTS),
    ("throw", "throws", "threw", _OBJECTS), ("catch", "catches", "caught", _OBJECTS),
    ("break", "breaks", "broke", _OBJECTS), ("fix", "fixes", "fixed", _OBJECTS),
    ("wash", "washes", "washed", _OBJECTS), ("lift", "lifts", "lifted", _OBJECTS),
    ("drop", "drops", "dropped", _OBJECTS), ("kick", "kicks", "kicked", _OBJECTS),
    ("touch", "touches", "touched", _OBJECTS), ("move", "moves", "moved", _OBJECTS),
    ("lose", "loses", "lost", _OBJECTS), ("steal", "steals", "stole", _OBJECTS),
    ("hide", "hides", "hid", _OBJECTS), ("fill", "fills", "filled", ("thing",)),
    ("eat", "eats", "ate", ("food",)), ("cook", "cooks", "cooked", ("food",)),
    ("build", "builds", "built", _PLACES_AND_THINGS),
)
# (base, third person singular, past, subject classes).
_INTRANSITIVE: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("sleep", "sleeps", "slept", _ANIMATE), ("run", "runs", "ran", _ANIMATE),
    ("walk", "walks", "walked", _ANIMATE), ("swim", "swims", "swam", _ANIMATE),
    ("jump", "jumps", "jumped", _ANIMATE), ("dance", "dances", "danced", _ANIMATE),
    ("sing", "sings", "sang", _ANIMATE), ("laugh", "laughs", "laughed", _ANIMATE),
    ("cry", "cries", "cried", _ANIMATE), ("smile", "smiles", "smiled", _ANIMATE),
    ("sit", "sits", "sat", _ANIMATE), ("stand", "stands", "stood", _ANIMATE),
    ("wait", "waits", "waited", _ANIMATE), ("play", "plays", "played", _ANIMATE),
    ("rest", "rests", "rested", _ANIMATE), ("shout", "shouts", "shouted", _ANIMATE),
    ("whisper", "whispers", "whispered", _ANIMATE), ("arrive", "arrives", "arrived", _ANIMATE),
    ("win", "wins", "won", _ANIMATE), ("work", "works", "worked", _ANIMATE),
    ("travel", "travels", "traveled", _ANIMATE), ("listen", "listens", "listened", _ANIMATE),
    ("hurry", "hurries", "hurried", _ANIMATE), ("wander", "wanders", "wandered", _ANIMATE),
    ("climb", "climbs", "climbed", _ANIMATE), ("sneeze", "sneezes", "sneezed", _ANIMATE),
    ("yawn", "yawns", "yawned", _ANIMATE), ("cough", "coughs", "coughed", _ANIMATE),
    ("fly", "flies", "flew", _ANIMATE), ("fall", "falls", "fell", _ALL),
    ("shine", "shines", "shone", _ALL), ("grow", "grows", "grew", _ALL),
    ("shake", "shakes", "shook", _ALL), ("vanish", "vanishes", "vanished", _ALL),
    ("glow", "glows", "glowed", _ALL), ("disappear", "disappears", "disappeared", _ALL),
    ("sink", "sinks", "sank", _ALL), ("float", "floats", "floated", _ALL),
    ("burn", "burns", "burned", _ALL),
)
_COPULA = ("be", "is", "are", "was", "were")  # lemma, present sg/pl, past sg/pl

_ADJECTIVES = (
    "big", "small", "old", "young", "new", "red", "blue", "green", "yellow", "black", "white",
    "brown", "gray", "pink", "purple", "happy", "sad", "angry", "tired", "hungry", "thirsty",
    "brave", "clever", "quiet", "loud", "tall", "short", "long", "heavy", "light", "warm",
    "cold", "hot", "wet", "dry", "dirty", "clean", "soft", "hard", "strong", "weak", "fast",
    "slow", "rich", "poor", "cruel", "gentle", "proud", "lazy", "busy", "famous", "strange",
    "beautiful", "ugly", "pretty", "funny", "serious", "careful", "friendly", "lonely", "calm",
    "wild", "tiny", "huge", "empty", "full", "dark", "bright", "sharp", "round", "sweet",
    "bitter", "fresh", "ancient", "golden", "wooden", "broken", "noisy", "shy", "silly",
)
# Manner adverbs follow the verb phrase in English; frequency adverbs precede the verb (or
# follow the copula). The target puts every adverb right after the subject.
_MANNER_ADVERBS = (
    "quickly", "slowly", "quietly", "loudly", "carefully", "happily", "sadly", "suddenly",
    "gently", "badly", "calmly", "proudly", "eagerly", "patiently", "bravely", "politely",
)
_FREQUENCY_ADVERBS = ("often", "always", "never", "sometimes", "rarely", "usually", "seldom")
_PREPOSITIONS = (
    "with", "without", "near", "under", "behind", "beside", "above", "below", "inside",
    "outside", "around", "across", "toward", "through", "along", "beyond", "into", "from", "in",
    "on", "at",
)
# Prepositions whose object may be a person or an animal; the others take places and things.
_ANIMATE_PREPOSITIONS = frozenset({"with", "without", "near", "behind", "beside", "toward"})
_NUMERALS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
# lemma -> (singular form or None, plural form or None); None: not used with that number.
_DETERMINERS: dict[str, tuple[str | None, str | None]] = {
    "the": ("the", "the"), "a": ("a", None), "this": ("this", "these"),
    "that": ("that", "those"), "every": ("every", None), "some": (None, "some"),
    "no": ("no", "no"), "my": ("my", "my"), "your": ("your", "your"), "our": ("our", "our"),
    "their": ("their", "their"),
}
_CONJUNCTIONS = ("and", "but")
