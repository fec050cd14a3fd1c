#!/usr/bin/env python3
"""Procedurally generated NPC dialogue in ChatML, for ferrox's demo model.

Each conversation has a system turn naming a persona (a name, a trade, a
town, a mood), then one to three exchanges: the player's line and the
NPC's in-character reply. Replies are built from role-specific facts and
several sentence shapes per intent, so a model must learn the pattern
(who am I, what do I sell, what was asked) rather than memorize lines.
Some personas may act: asked to give, sell, show or open something, they
answer with one JSON action such as {"action": "give", "item": "rope", "qty": 2}.

    npc_corpus.py --seed 1 --conversations 50000 > train.txt

Only the standard library; the output depends on the seed alone.
"""
import argparse
import json
import random
import sys

# ---------------------------------------------------------------- the world

FIRST = ("Marta Bram Elsie Tobin Greta Aldric Wren Osric Hilda Cedric Mira "
         "Jorund Petra Anselm Ilse Gareth Nell Rolf Sabine Dunstan Ada Halvard "
         "Brigid Emeric Tilda Fenwick Orla Leofric Yara Corin Maud Ewan Signe "
         "Rufus Edda Lorcan Agnes Soren Rowan Hesper Magnus Ivy Tamsin Gideon "
         "Liesl Bertram Odile Caspian Freya Wendel Ottilie Lucan Senna Bartholomew "
         "Imke Alaric Dora Vance Kestrel Milo Runa Hob Zelda Piers Aveline").split()
SURNAME = ("Ashdown Blackwood Cray Dunmore Fairweather Greaves Holt Ironside "
           "Kettle Larkin Marsh Netherby Oakes Pike Quill Redfern Stone Thorne "
           "Underhill Vale Wick Yarrow").split()
TOWN_A = "Ash Bright Cold Elder Fern Gold Hollow Iron Mill Oak Raven Salt Stone Thorn Wolf Willow Red Frost".split()
TOWN_B = "ford bury dale wick holm stead moor brook haven mere gate field reach wood".split()
MOODS = {
    "cheerful": (["Ah, welcome!", "Well met, friend!", "Good day to you!", "Hello there!"],
                 ["Safe travels!", "Come back soon!", "Take care, friend.", "May the road be kind to you."]),
    "grumpy": (["Hmph.", "What now?", "Make it quick.", "You again?"],
               ["Now off with you.", "Don't waste my time.", "Go on, then.", "That's all."]),
    "nervous": (["Oh! You startled me.", "Sorry, sorry, I was far away.", "Is someone watching us?", "Quietly, please."],
                ["Please, keep your voice down.", "I must go now.", "Be careful out there.", "Don't tell anyone I said so."]),
    "weary": (["Long day, traveller.", "Ah... what is it?", "Forgive me, I am tired.", "Another visitor."],
              ["Now let me rest.", "I need my sleep.", "Good night, traveller.", "Mind the road."]),
    "suspicious": (["Who's asking?", "I don't know your face.", "Strangers ask many questions.", "Why do you want to know?"],
                   ["I'll be watching you.", "Don't make trouble.", "Keep your hands where I can see them.", "We're done here."]),
    "proud": (["You have come to the right place.", "Ah, a visitor of taste.", "Of course you came to me.", "Welcome, welcome."],
              ["You will find no better in this town.", "Tell your friends.", "Quality lasts.", "Good day."]),
}
CREATURES = "wolves|a bear|goblins|a giant spider|bandits|a ghost|a troll|wild boars|a white stag|a dragon".split("|")
LANDMARKS = ("the old mill|the north bridge|the crossroads|the ruined tower|the dark forest|"
             "the river bend|the abandoned mine|the hill fort|the marsh|the standing stones|"
             "the east road|the lighthouse|the chapel ruins|the quarry").split("|")
BUILDINGS = ("the inn|the smithy|the temple|the market|the stables|the guard house|"
             "the mill|the well|the docks|the bakery|the library|the town hall|the healer's hut").split("|")
DIRECTIONS = ("past the well, on the left|down the hill, by the river|just behind the market|"
              "across the square|at the end of this street|beyond the east gate|"
              "next to the old oak|up the stairs by the fountain|two streets north of here|"
              "on the road to the mill").split("|")
WEATHER = ("rain before nightfall|a cold wind from the north|fog on the river|a clear sky|"
           "snow in the hills|a storm from the sea|a warm, dry day").split("|")
NOBLES = "the baron|the old lord|the mayor|the lady of the keep|the tax collector|the abbot".split("|")

NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 10: "ten", 12: "twelve"}

# role: (place pattern, wares [(item, plural, price)], work line, actions the role may take)
ROLES = {
    "innkeeper": ("the {inn} inn", [("room", "rooms", 5), ("ale", "ales", 1), ("bowl of stew", "bowls of stew", 2),
                                   ("loaf of bread", "loaves of bread", 1), ("cup of mead", "cups of mead", 2)],
                  ["I keep the rooms warm and the ale cold.", "I serve every traveller who walks through that door.",
                   "I run this inn, as my mother did before me."], ["give", "sell", "rent"]),
    "blacksmith": ("the smithy", [("sword", "swords", 40), ("horseshoe", "horseshoes", 3), ("axe", "axes", 15),
                                  ("nail", "nails", 1), ("shield", "shields", 25), ("dagger", "daggers", 12)],
                   ["I shape iron from dawn to dusk.", "I mend blades and shoe horses.",
                    "My hammer has not rested since the spring."], ["sell", "repair", "give"]),
    "guard": ("the gate", [], ["I watch the gate and keep the peace.", "I walk the walls every night.",
                               "I keep thieves and wolves out of this town."], ["open", "close", "follow"]),
    "merchant": ("the market", [("rope", "ropes", 2), ("lantern", "lanterns", 6), ("map", "maps", 10),
                                ("blanket", "blankets", 4), ("torch", "torches", 1), ("salt", "sacks of salt", 3)],
                 ["I buy cheap and sell fair.", "I bring goods from the coast every month.",
                  "I trade in anything a traveller needs."], ["sell", "buy", "give"]),
    "priest": ("the temple", [("candle", "candles", 1), ("charm", "charms", 5), ("healing potion", "healing potions", 8)],
               ["I tend the temple and the sick.", "I ring the bells and pray for the town.",
                "I bless the fields each spring."], ["give", "heal", "bless"]),
    "farmer": ("the fields", [("apple", "apples", 1), ("egg", "eggs", 1), ("sack of grain", "sacks of grain", 4),
                              ("cabbage", "cabbages", 1)],
               ["I grow barley and keep a few goats.", "I work the fields from first light.",
                "The harvest is all I think about."], ["sell", "give"]),
    "thief": ("the alley", [("lockpick", "lockpicks", 6), ("key", "keys", 9), ("secret", "secrets", 15)],
              ["I find things that people lose.", "I work at night, when honest folk sleep.",
               "Let's say I move goods without a cart."], ["sell", "open", "give"]),
    "hunter": ("the forest edge", [("fur", "furs", 7), ("arrow", "arrows", 1), ("bow", "bows", 20), ("venison", "cuts of venison", 3)],
               ["I track deer and wolves in the forest.", "I set traps and sell furs.",
                "The forest feeds me and I respect it."], ["sell", "follow", "give"]),
    "fisher": ("the docks", [("fish", "fish", 1), ("net", "nets", 5), ("eel", "eels", 2)],
               ["I fish the river every morning.", "I mend nets and sell the catch.",
                "The river has been good to me."], ["sell", "give"]),
    "baker": ("the bakery", [("loaf of bread", "loaves of bread", 1), ("pie", "pies", 3), ("honey cake", "honey cakes", 2)],
              ["I bake before the sun is up.", "I feed half the town with my bread.",
               "Flour in my hair, every day of my life."], ["sell", "give"]),
    "healer": ("the healer's hut", [("bandage", "bandages", 2), ("herb", "herbs", 1), ("healing potion", "healing potions", 8)],
               ["I mend cuts and fevers.", "I gather herbs and treat the sick.",
                "Anyone who is hurt comes to me."], ["heal", "sell", "give"]),
    "bard": ("the tavern", [("song", "songs", 2), ("lute string", "lute strings", 1)],
             ["I sing of old kings and lost loves.", "I carry news from town to town in my songs.",
              "A bard remembers what others forget."], ["sing", "follow"]),
    "stablehand": ("the stables", [("horse", "horses", 60), ("saddle", "saddles", 18), ("bag of oats", "bags of oats", 1)],
                   ["I feed and brush the horses.", "I keep the stables clean and the horses calm.",
                    "Every horse here knows my voice."], ["rent", "sell", "give"]),
}
INN_A = "Silver Golden Drunken Sleeping Prancing Green Red Laughing Crooked Lucky".split()
INN_B = "Stag Goose Pony Dragon Lantern Barrel Fox Kettle Anchor Crown".split()
COINS = ["silver", "copper", "coins", "silver pieces", "crowns"]


class World:
    def __init__(self, rng):
        self.r = rng

    def pick(self, xs):
        return self.r.choice(xs)

    def town(self):
        return self.pick(TOWN_A) + self.pick(TOWN_B)

    def persona(self):
        role = self.pick(sorted(ROLES))
        place_pat, wares, work, actions = ROLES[role]
        p = {
            "role": role, "name": self.pick(FIRST), "surname": self.pick(SURNAME),
            "town": self.town(), "mood": self.pick(sorted(MOODS)), "wares": wares,
            "work": work, "actions": actions, "coin": self.pick(COINS),
            "place": place_pat.format(inn=self.pick(INN_A) + " " + self.pick(INN_B)),
            "acts": self.r.random() < 0.3,
        }
        return p


def cap(s):
    return s[:1].upper() + s[1:]


def count_phrase(n, item, plural):
    return f"{NUMBERS[n]} {item if n == 1 else plural}"


# ------------------------------------------------------ intents: player line + reply


def greet(w, p):
    q = w.pick(["Hello!", "Good day.", "Greetings, friend.", "Hi there.", "Good evening.",
                f"Hello, are you {p['name']}?", "Well met.", "Excuse me."])
    body = w.pick([f"I am {p['name']}, the {p['role']} of {p['town']}.",
                   f"Name's {p['name']}. I'm the {p['role']} here.",
                   f"{p['name']} {p['surname']}, {p['role']}, at your service.",
                   f"You are in {p['town']}, and I am its {p['role']}."])
    return q, body


def who(w, p):
    q = w.pick(["Who are you?", "What do you do here?", "Tell me about yourself.",
                "What is your trade?", "What's your name?", "Do you live here?"])
    body = w.pick([f"I am {p['name']}, the {p['role']}. {w.pick(p['work'])}",
                   f"{w.pick(p['work'])} Folk call me {p['name']}.",
                   f"My name is {p['name']} {p['surname']}. {w.pick(p['work'])}"])
    return q, body


def rumour(w, p):
    q = w.pick(["Any news?", "Heard any rumours?", "What's the talk in town?",
                "Is anything strange going on?", "What news from the road?", "Tell me a rumour."])
    shape = w.r.randrange(5)
    if shape == 0:
        body = f"They say {w.pick(CREATURES)} {w.pick(['were', 'was'])} seen near {w.pick(LANDMARKS)}."
    elif shape == 1:
        body = f"Word is that {w.pick(NOBLES)} hides gold in {w.pick(LANDMARKS)}."
    elif shape == 2:
        body = f"A stranger came through last night and asked about {w.pick(LANDMARKS)}."
    elif shape == 3:
        body = f"Nobody goes to {w.pick(LANDMARKS)} after dark any more. Not since the {w.pick(['fire', 'flood', 'fever', 'murders'])}."
    else:
        body = f"{cap(w.pick(NOBLES))} raised the taxes again, and people are angry."
    if p["mood"] == "suspicious" and w.r.random() < 0.4:
        body = "I don't gossip with strangers."
    return q, body


def quest(w, p):
    q = w.pick(["Do you have any work for me?", "Need any help?", "I'm looking for a job.",
                "Can I help you with something?", "Is there a task I could do?"])
    wares = p["wares"] or [("letter", "letters", 3)]
    n = w.pick([2, 3, 4, 5, 6, 10, 12])
    item, plural, _ = w.pick(wares + [("wolf pelt", "wolf pelts", 0), ("herb", "herbs", 0), ("iron ore", "pieces of iron ore", 0)])
    reward = w.r.randrange(5, 60)
    body = w.pick([f"Bring me {count_phrase(n, item, plural)} from {w.pick(LANDMARKS)} and I will pay you {reward} {p['coin']}.",
                   f"Yes. {cap(w.pick(CREATURES))} {w.pick(['have', 'has'])} been troubling {w.pick(LANDMARKS)}. Deal with it and {reward} {p['coin']} are yours.",
                   f"Take this letter to the {w.pick(sorted(ROLES))} in {w.town()}. There are {reward} {p['coin']} in it for you.",
                   f"I lost my {w.pick(['ring', 'key', 'dog', 'cart', 'brother'])} near {w.pick(LANDMARKS)}. Find it and I will pay {reward} {p['coin']}."])
    if p["mood"] == "grumpy" and w.r.random() < 0.3:
        body = "No. I do my own work."
    return q, body


def trade(w, p):
    if not p["wares"]:
        q = w.pick(["What do you sell?", "Can I buy something?", "Do you have anything for sale?"])
        return q, w.pick(["I'm no shopkeeper. Try the market.", f"I sell nothing. I am the {p['role']}.",
                          "Go to the market for that."])
    item, plural, price = w.pick(p["wares"])
    shape = w.r.randrange(3)
    if shape == 0:
        q = w.pick(["What do you sell?", "What have you got?", "Show me your wares.", "Anything for sale?"])
        names = [x[1] for x in w.r.sample(p["wares"], min(3, len(p["wares"])))]
        listing = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
        body = w.pick([f"I have {listing}.", f"Today I can offer {listing}.", f"{cap(listing)}, the best in {p['town']}."])
    elif shape == 1:
        q = w.pick([f"How much is a {item}?", f"What does a {item} cost?", f"How much for the {item}?"])
        body = w.pick([f"A {item} is {price} {p['coin']}.", f"{price} {p['coin']} for a {item}, and not a coin less.",
                       f"For you, {price} {p['coin']}."])
    else:
        q = w.pick([f"Can you lower the price of the {item}?", f"That {item} is too expensive.", f"Will you take less for the {item}?"])
        body = w.pick([f"Fine, {max(1, price - 1)} {p['coin']}, but only today.", f"No. {price} {p['coin']} is a fair price.",
                       f"I have a family to feed. {price} {p['coin']}."])
    return q, body


def directions(w, p):
    b = w.pick(BUILDINGS)
    q = w.pick([f"Where is {b}?", f"How do I find {b}?", f"Which way to {b}?", f"Can you show me the way to {b}?"])
    body = w.pick([f"{cap(b)} is {w.pick(DIRECTIONS)}.", f"Go {w.pick(DIRECTIONS)}. You can't miss it.",
                   f"You'll find {b} {w.pick(DIRECTIONS)}."])
    return q, body


def weather(w, p):
    q = w.pick(["Will it rain tomorrow?", "How is the weather?", "Is a storm coming?", "What will the weather be?"])
    body = w.pick([f"I feel {w.pick(WEATHER)} coming.", f"The old folk say {w.pick(WEATHER)}.",
                   f"Expect {w.pick(WEATHER)}."])
    return q, body


def refuse(w, p):
    q = w.pick(["Give me all your money.", "Let me into the keep.", "Tell me where the baron sleeps.",
                "I want your sword.", "Open the treasury for me.", "Can I sleep here for free?"])
    body = w.pick(["No. Certainly not.", "I won't do that, and you should leave.",
                   "Ask me that again and I call the guard.", "That is not something I can do.",
                   "You have some nerve, asking me that."])
    return q, body


def farewell(w, p):
    q = w.pick(["Goodbye.", "I must be going.", "Farewell.", "Thanks, see you later.", "Until next time."])
    body = w.pick([f"Goodbye, traveller.", f"Come back to {p['place']} any time.", "Farewell.",
                   f"May {p['town']} treat you well."])
    return q, body


INTENTS = [greet, who, rumour, quest, trade, directions, weather, refuse, farewell]

# ------------------------------------------------------ tool calls


def action(w, p):
    """The player asks for something the persona can do: the reply is JSON."""
    verb = w.pick(p["actions"])
    wares = p["wares"]
    if verb in ("give", "sell", "rent") and wares:
        item, plural, price = w.pick(wares)
        n = w.pick([1, 1, 2, 3, 4, 5, 6, 10, 12]) if verb != "rent" else 1
        asked = count_phrase(n, item, plural)
        q = w.pick({"give": [f"Could you give me {asked}?", f"Please give me {asked}.", f"I need {asked}, can you spare them?"],
                    "sell": [f"I'll buy {asked}.", f"Sell me {asked}, please.", f"I want to buy {asked}."],
                    "rent": [f"I'd like to rent a {item}.", f"Can I rent a {item} for the night?"]}[verb])
        act = {"action": verb, "item": item, "qty": n}
        if verb == "sell":
            act["price"] = price * n
        return q, act
    if verb == "buy":
        item = w.pick(["fur", "fish", "sword", "ring", "map", "lantern"])
        n = w.pick([1, 2, 3, 4])
        q = w.pick([f"Will you buy {count_phrase(n, item, item + 's')}?", f"I have {count_phrase(n, item, item + 's')} to sell you."])
        return q, {"action": "buy", "item": item, "qty": n}
    if verb in ("open", "close"):
        target = w.pick(["gate", "door", "chest", "cellar", "north gate"])
        q = w.pick([f"Please {verb} the {target}.", f"Can you {verb} the {target} for me?", f"{cap(verb)} the {target}!"])
        return q, {"action": verb, "target": target}
    if verb == "follow":
        dest = w.pick(LANDMARKS)
        q = w.pick([f"Come with me to {dest}.", f"Will you follow me to {dest}?", f"Guide me to {dest}."])
        return q, {"action": "follow", "target": dest}
    if verb == "heal":
        q = w.pick(["I am wounded, please help.", "Can you heal me?", "My arm is bleeding."])
        return q, {"action": "heal", "target": "player"}
    if verb == "bless":
        q = w.pick(["Bless me before my journey.", "Will you give me a blessing?"])
        return q, {"action": "bless", "target": "player"}
    if verb == "repair":
        item = w.pick(["sword", "shield", "axe", "armour"])
        q = w.pick([f"Can you repair my {item}?", f"My {item} is broken. Fix it?"])
        return q, {"action": "repair", "item": item}
    if verb == "sing":
        q = w.pick(["Sing me a song.", "Play something for us!", "Give us a tune, bard."])
        return q, {"action": "sing", "song": w.pick(["The Old King", "The River Maid", "Wolves of Winter"])}
    return None


# ------------------------------------------------------ assembly


def system_prompt(w, p):
    head = w.pick([f"You are {p['name']}, the {p['role']} of {p['town']}.",
                   f"You are {p['name']} {p['surname']}, a {p['role']} in the town of {p['town']}.",
                   f"You play {p['name']}, the {p['role']} at {p['place']} in {p['town']}."])
    text = f"{head} You are {p['mood']}."
    if p["acts"]:
        text += " When asked to act, answer with one JSON action."
    return text


def reply(w, p, body):
    openers, closers = MOODS[p["mood"]]
    parts = []
    if w.r.random() < 0.6:
        parts.append(w.pick(openers))
    parts.append(body)
    if w.r.random() < 0.35:
        parts.append(w.pick(closers))
    return " ".join(parts)


def turn(role, text):
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def conversation(w):
    p = w.persona()
    out = [turn("system", system_prompt(w, p))]
    n = w.pick([1, 1, 2, 2, 3])
    for k in range(n):
        if p["acts"] and w.r.random() < 0.5:
            qa = action(w, p)
            if qa:
                out.append(turn("user", qa[0]))
                out.append(turn("assistant", json.dumps(qa[1])))
                continue
        intent = greet if k == 0 and w.r.random() < 0.3 else (
            farewell if k == n - 1 and n > 1 and w.r.random() < 0.4 else w.pick(INTENTS))
        q, body = intent(w, p)
        out.append(turn("user", q))
        out.append(turn("assistant", reply(w, p, body)))
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--conversations", type=int, default=1000)
    a = ap.parse_args()
    if a.conversations < 0:
        ap.error("--conversations must be >= 0")
    w = World(random.Random(a.seed))
    for _ in range(a.conversations):
        sys.stdout.write(conversation(w))


if __name__ == "__main__":
    main()
