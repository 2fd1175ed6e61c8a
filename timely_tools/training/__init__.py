"""Training of the shipped planner model, the smollm2-135m-planner LoRA adapter and the learned predictors."""
