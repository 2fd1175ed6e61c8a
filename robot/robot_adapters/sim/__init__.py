"""The protocol simulators and their helpers: the Tello SDK simulator with its H.264 camera, the
fake IndyDCP3 servicer, the simulated fleet (sampled skill durations) and the network namespaces
the Tello simulators run in, and the Nav2 stack simulator of a mobile base (``nav2_sim``, its world
``nav2_map``). The real adapters never import them; ``robot_adapters.executors``
starts them for the ``sim``, ``tello-sim`` and ``indy-sim`` adapters."""
