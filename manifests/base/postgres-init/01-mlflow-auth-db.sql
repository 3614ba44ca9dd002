-- MLflow's basic-auth user store lives in its own database beside the tracking store ("mlflow").
CREATE DATABASE mlflow_auth;
