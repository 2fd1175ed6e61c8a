"""What the detector's classes are, said another way: training data for asking by kind or purpose.

A camera drone's detector knows COCO's 80 classes, but people ask for "an animal" or "something
to keep food cold". The planner model learns here to answer such a request with the class that
is meant (``scan(refrigerator)``), never with the request's own words (``scan(food)``, which no
detector finds and the object check refuses).

- :data:`SUPERCATEGORIES`: COCO's own supercategories (the ``supercategory`` field of the
  COCO 2017 annotation files' ``categories``), said in plain words, with their classes.
- :data:`USES`: what each class is for or what it is, as verb phrases ("cut paper", with the
  preposition a request ends with, "with") and short descriptions ("a thing with wheels"),
  written for this training set from common knowledge of the objects.

These are training data only: nothing at run time reads them (the object check judges plans
with the meaning model, :mod:`llm_planner_node.grounding.objects`).
"""

from __future__ import annotations

#: COCO supercategory (in plain words, the ways a request may say it) -> its classes
SUPERCATEGORIES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("vehicle", "means of transport"): ("bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat"),
    ("animal", "creature"): ("bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe"),
    ("pet", "domestic animal"): ("cat", "dog"),
    ("farm animal", "livestock"): ("horse", "sheep", "cow"),
    ("wild animal", "zoo animal"): ("elephant", "bear", "zebra", "giraffe"),
    ("accessory", "personal item"): ("backpack", "umbrella", "handbag", "tie", "suitcase"),
    ("piece of luggage", "bag"): ("backpack", "handbag", "suitcase"),
    ("piece of sports gear", "sports equipment", "toy to play with outside"):
        ("frisbee", "skis", "snowboard", "sports_ball", "kite", "baseball_bat", "baseball_glove", "skateboard",
         "surfboard", "tennis_racket"),
    ("piece of kitchenware", "kitchen utensil", "piece of cutlery", "piece of tableware"):
        ("bottle", "wine_glass", "cup", "fork", "knife", "spoon", "bowl"),
    ("food", "snack", "something edible"): ("banana", "apple", "sandwich", "orange", "broccoli", "carrot", "hot_dog",
                                            "pizza", "donut", "cake"),
    ("fruit", "piece of fruit"): ("banana", "apple", "orange"),
    ("vegetable", "veggie"): ("broccoli", "carrot"),
    ("dessert", "sweet treat"): ("donut", "cake"),
    ("piece of furniture", "furniture"): ("chair", "couch", "potted_plant", "bed", "dining_table", "toilet"),
    ("piece of electronics", "electronic device", "gadget"): ("tv", "laptop", "mouse", "remote", "keyboard",
                                                            "cell_phone"),
    ("appliance", "kitchen appliance", "household appliance"): ("microwave", "oven", "toaster", "sink",
                                                                 "refrigerator"),
    ("street fixture", "thing on a street"): ("traffic_light", "fire_hydrant", "stop_sign", "parking_meter", "bench"),
}

#: class -> what it is for: (verb phrase, the preposition a request may end with, "" for none)
USES: dict[str, tuple[tuple[str, str], ...]] = {
    "person": (("talk to", ""), ("ask for help", ""), ("hand a package to", "")),
    "bicycle": (("pedal to work", "on"), ("ride to the shop", "")),
    "car": (("drive to town", "in"), ("give me a lift", "")),
    "motorcycle": (("ride fast on two wheels", ""),),
    "airplane": (("fly across the ocean", "in"), ("travel by air", "")),
    "bus": (("take many passengers to town", ""), ("commute in", "")),
    "train": (("travel on rails", ""),),
    "truck": (("haul heavy cargo", ""), ("move furniture", "with")),
    "boat": (("cross the lake", "in"), ("sail", "in")),
    "traffic_light": (("control the traffic", ""), ("tell cars when to stop", "")),
    "fire_hydrant": (("get water to put out a fire", "from"),),
    "stop_sign": (("tell drivers to halt", ""),),
    "parking_meter": (("pay for parking", "at"),),
    "bench": (("rest outdoors", "on"), ("sit in the park", "on")),
    "bird": (("sing in the morning", ""),),
    "cat": (("purr on my lap", ""), ("chase mice", "")),
    "dog": (("take for a walk", ""), ("fetch a stick", ""), ("guard the house", "")),
    "horse": (("ride across a field", ""), ("pull a cart", "")),
    "sheep": (("give us wool", ""),),
    "cow": (("give us milk", ""),),
    "elephant": (("has a trunk", ""),),
    "bear": (("hibernate all winter", ""),),
    "zebra": (("has black and white stripes", ""),),
    "giraffe": (("has a very long neck", ""),),
    "backpack": (("carry my books", "in"), ("pack for a hike", "")),
    "umbrella": (("stay dry when it rains", "with"), ("shade me from the sun", "")),
    "handbag": (("keep my purse and keys", "in"),),
    "tie": (("wear with a suit", ""),),
    "suitcase": (("pack clothes for a trip", "in"), ("take on a journey", "")),
    "frisbee": (("toss across the park", ""),),
    "skis": (("slide down a snowy slope", "on"),),
    "snowboard": (("ride down the mountain in winter", "on"),),
    "sports_ball": (("kick around", ""), ("play a game of catch", "with")),
    "kite": (("fly on a windy day", ""),),
    "baseball_bat": (("hit a baseball", "with"),),
    "baseball_glove": (("catch a baseball", "with"),),
    "skateboard": (("do tricks at the skate park", "on"), ("roll down the sidewalk", "on")),
    "surfboard": (("ride the waves", "on"),),
    "tennis_racket": (("hit a tennis ball", "with"), ("play tennis", "with")),
    "bottle": (("hold water", ""), ("carry a drink", "in")),
    "wine_glass": (("serve wine", "in"),),
    "cup": (("have my tea", "from"), ("drink coffee", "out of")),
    "fork": (("eat pasta", "with"), ("spear a piece of food", "with")),
    "knife": (("slice bread", "with"), ("chop vegetables", "with")),
    "spoon": (("eat soup", "with"), ("stir my tea", "with")),
    "bowl": (("serve salad", "in"), ("hold soup", "")),
    "banana": (("peel and eat", ""),),
    "apple": (("bite into", ""), ("keep the doctor away", "")),
    "sandwich": (("eat for a quick lunch", ""),),
    "orange": (("squeeze for juice", ""),),
    "broccoli": (("steam as a green side dish", ""),),
    "carrot": (("feed a rabbit", ""),),
    "hot_dog": (("eat at a baseball game", ""),),
    "pizza": (("order for dinner", ""), ("share at a party", "")),
    "donut": (("have with my coffee", ""),),
    "cake": (("celebrate a birthday", "with"),),
    "chair": (("sit down", "on"), ("sit at the desk", "on")),
    "couch": (("lie down and relax", "on"), ("watch a film from", "")),
    "potted_plant": (("add some green to the room", ""), ("water", "")),
    "bed": (("take a nap", "in"), ("rest at night", "in")),
    "dining_table": (("eat dinner", "at"), ("set the plates", "on")),
    "toilet": (("use the bathroom", ""),),
    "tv": (("watch a show", "on"), ("see the evening programme", "on")),
    "laptop": (("send an email", "from"), ("work on a document", "on")),
    "mouse": (("move the cursor", "with"), ("click on the screen", "with")),
    "remote": (("switch the tv on", "with"), ("turn up the volume", "with")),
    "keyboard": (("write an email", "on"), ("enter text", "with")),
    "cell_phone": (("ring a friend", "with"), ("send a text message", "from")),
    "microwave": (("warm up leftovers", "in"), ("reheat my coffee", "in")),
    "oven": (("bake bread", "in"), ("roast a chicken", "in")),
    "toaster": (("brown slices of bread", "in"),),
    "sink": (("rinse the dishes", "in"), ("fill a glass of water", "at")),
    "refrigerator": (("keep the milk cool", "in"), ("store fresh vegetables", "in")),
    "book": (("pass the time reading", ""), ("learn a story", "from")),
    "clock": (("know what time it is", ""), ("check the hour", "")),
    "vase": (("hold a bunch of roses", ""), ("put the tulips", "in")),
    "scissors": (("snip a ribbon", "with"), ("trim the paper", "with")),
    "teddy_bear": (("cuddle at bedtime", ""),),
    "hair_drier": (("blow dry my hair", "with"),),
    "toothbrush": (("clean my teeth", "with"), ("brush my teeth", "with")),
}
