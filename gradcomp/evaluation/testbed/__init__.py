"""Local network namespaces with shaped links, and the validation of the model on them."""
