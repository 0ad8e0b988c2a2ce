"""The Gradio app: one module per tab; ``app.build_app`` assembles them."""
