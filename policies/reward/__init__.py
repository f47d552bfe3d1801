"""Learned rewards: a success classifier on camera frames (+ state), as HIL-SERL uses on real robots."""

from policies.reward.classifier import ClassifierConfig, SuccessClassifier, load_classifier

__all__ = ["ClassifierConfig", "SuccessClassifier", "load_classifier"]
