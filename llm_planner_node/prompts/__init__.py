"""What the model is asked and allowed to write: the prompt per skill set, worked examples, quantities in the skills' units, and the plan grammar the engine decodes under."""
