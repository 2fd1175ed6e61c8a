"""The robot link's one home: its pure rules (:mod:`.rules`: sequence, term, lease), their signing
and verification (:mod:`.signing`) and its ROS part (:mod:`.ros`: QoS, topics, message conversion)."""
