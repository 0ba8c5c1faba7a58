"""The depth study (studies/depth.yaml): its page sections and its eval-gap tool."""
