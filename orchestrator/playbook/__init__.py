"""The playbook language: models, YAML loading with located errors, templating."""
