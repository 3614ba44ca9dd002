"""Models-from-code entry point of the registered pyfunc: MLflow runs this file to get the model.

Logging code instead of a pickled object means loading the model never unpickles executable state.
"""

from mlflow.models import set_model

from ctpipe.components.steps.register.pyfunc_model import CtpipeClassifier

set_model(CtpipeClassifier())
